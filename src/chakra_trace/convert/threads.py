"""Cross-thread order of an untimed host trace: a thread waits for the one it handed work to.

A host-only PyTorch execution trace (no Kineto) has no times, only the order in which ops were
recorded: PyTorch gives each op its id when it starts, from one counter shared by every
thread, so ids are the execution order across threads. The converter orders each thread's
nodes, but without times nothing says that the main thread, having called ``backward()``,
waits while the autograd thread runs it; a simulation would run the backward pass beside the
forward from time 0. So where the node before a node in id order is on another thread, the
node depends on it: the main thread's last node before the backward -> the autograd thread's
first (the fork), the autograd thread's last -> the main thread's next (the join).

Limits. Threads that truly ran at once and are recorded interleaved (a second Python thread
running ops, a data loader worker that records ops) are serialized in record order: each
switch in the id order becomes an edge, so the simulation runs them one after the other as
interleaved in the recording. A thread that holds only communication nodes (a backend's worker
thread, as gloo records its all-reduce) is left out: its nodes keep their own edges (after
their issuer, the issuer's thread joins them). Traces with recorded times (Kineto) do not get
these edges: their order edges come from the measured times.
"""

from __future__ import annotations

import numpy as np


def record_order_edges(ids: np.ndarray, thread: np.ndarray, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges (positions of the dependent nodes, positions of what they depend on) among host
    nodes given by their ET ids, threads and whether each is a communication node: in id
    order, each node whose predecessor is on another thread depends on that predecessor.
    Threads with no node but communication nodes take no part."""
    ids = np.asarray(ids, np.int64)
    thread = np.asarray(thread, np.int64)
    comm = np.asarray(comm, bool)
    if ids.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    codes, th = np.unique(thread, return_inverse=True)
    th = th.reshape(-1)
    computes = np.bincount(th[~comm], minlength=codes.size) > 0  # threads that run ops of their own
    part = np.flatnonzero(computes[th])
    part = part[np.argsort(ids[part], kind="stable")]
    switch = np.flatnonzero(thread[part[1:]] != thread[part[:-1]]) + 1
    return part[switch], part[switch - 1]
