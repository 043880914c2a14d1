"""Checks across ranks: collective sequences per communicator group, and send/receive pairs."""

from __future__ import annotations

import numpy as np

from ..schema.enums import Attr, CollectiveType, collective_name
from ..schema.groups import declared_groups, rows_by_group_per_rank
from ..schema.trace import Trace
from ..timeline.matching import p2p_rows, pair_p2p
from .checks import validate_trace
from .report import ERROR, SAMPLE, WARNING, Issue, ValidationReport, count_noun, sample_ids


def validate_workload(workload) -> ValidationReport:
    """Check every rank, then that ranks agree: collective sequences per communicator group and
    send/receive pairs."""
    issues: list[Issue] = []
    nodes = 0
    for r in workload.ranks:
        rep = validate_trace(workload.traces[r], rank=r)
        issues.extend(rep.issues)
        nodes += rep.nodes
    issues.extend(_check_groups(workload))
    issues.extend(_check_p2p(workload))
    return ValidationReport(issues, nodes=nodes, ranks=list(workload.ranks)).sort()


class _Sequences:
    """Each rank's collective sequence per group, from one pass over each trace (a pass per
    group and rank cost groups x ranks x nodes: minutes on a file of 200,000 groups)."""

    def __init__(self, traces: dict[int, Trace]):
        self.traces = traces
        self.rows = rows_by_group_per_rank(traces)
        self.sizes: dict[int, np.ndarray] = {}

    def names(self, rank: int) -> set[str]:
        """Groups the rank issues collectives on ("" for the unnamed one)."""
        return set(self.rows[rank])

    def __call__(self, rank: int, group: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(comm_type, comm_size or -1, node id) of the typed collectives a rank issues on a group;
        `VARIES` as the size of an all-to-all: an all_to_allv's bytes differ per rank by design, and
        not every backend records the split sizes that would tell it from an even one."""
        t = self.traces[rank]
        m = self.rows[rank].get(group, _NONE)
        if id(t) not in self.sizes:
            size = np.where(t.has(Attr.COMM_SIZE), t.comm_size, -1)
            split = t.attr_column("in_split_size")[1] | t.attr_column("out_split_size")[1]
            self.sizes[id(t)] = np.where(split | (t.comm_type == CollectiveType.ALL_TO_ALL), VARIES, size)
        return t.comm_type[m].astype(np.int64), self.sizes[id(t)][m].astype(np.int64), t.ids[m]


_NONE = np.zeros(0, np.int64)


VARIES = -2  # comm_size of a collective whose size differs per rank by design (all_to_allv)


def _bytes(size: int) -> str:
    return f"{size:,} B" if size >= 0 else "no comm_size"


def _describe(ct: int, size: int) -> str:
    if size == VARIES:
        return f"{collective_name(ct)} (bytes per rank may differ)"
    return f"{collective_name(ct)} of {size:,} B" if size >= 0 else f"{collective_name(ct)} (no comm_size)"


def _rank_list(ranks: list[int]) -> str:
    s = ", ".join(str(r) for r in ranks[:10])
    more = f", … ({len(ranks) - 10} more)" if len(ranks) > 10 else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + s + more


def _check_groups(workload) -> list[Issue]:
    issues: list[Issue] = []
    label = lambda g: "the all-ranks group" if g == "" else f"group {g!r}"  # noqa: E731
    seq = _Sequences(workload.traces)
    issuing: dict[str, list[int]] = {}  # group -> ranks that issue collectives on it
    for r in workload.ranks:
        for g in seq.names(r):
            issuing.setdefault(g, []).append(r)
    groups = workload.all_groups()
    for g, m in declared_groups(workload.traces.values()).items():  # as the simulator reads them
        if g in groups and g not in workload.groups:
            groups[g] = m
    for g, members in groups.items():
        absent = [r for r in members if r not in workload.traces]
        if absent:
            # one rank's trace of a bigger job: `simulate` takes the others as copies (`simulate.peers`)
            taken = " (`simulate` takes them as symmetric copies of the ranks present)" if g in issuing else ""
            issues.append(
                Issue(
                    WARNING,
                    "group-missing-rank",
                    len(absent),
                    f"{label(g)} lists {_rank_list(absent)} with no trace{taken}; their collectives are not checked",
                    [],
                    None,
                    False,
                    {"group": g, "ranks": absent},
                )
            )
        if g in workload.groups:
            inside = set(members)
            outside = [r for r in issuing.get(g, ()) if r not in inside]
            for r in outside:
                rank_ids = seq(r, g)[2]
                issues.append(
                    Issue(
                        ERROR,
                        "not-in-group",
                        int(rank_ids.size),
                        f"rank {r} issues {count_noun(int(rank_ids.size), 'collective')} on {label(g)}, "
                        f"which does not include it",
                        sample_ids(rank_ids),
                        r,
                        False,
                        {"group": g},
                    )
                )
        present = [r for r in members if r in workload.traces]
        if len(present) < 2 or g not in issuing:  # (no rank issues on it: no sequence can differ)
            continue
        seqs = {r: seq(r, g) for r in present}
        ref = present[0]
        rt, rs, _ = seqs[ref]
        first = None
        for r in present[1:]:
            t_, s_, _ = seqs[r]
            L = min(rt.size, t_.size)
            sizes_differ = (rs[:L] != s_[:L]) & (rs[:L] != VARIES) & (s_[:L] != VARIES)
            d = np.flatnonzero((rt[:L] != t_[:L]) | sizes_differ)
            if d.size and (first is None or d[0] < first):
                first = int(d[0])
        if first is not None:
            by: dict[str, list[int]] = {}
            ids: list[int] = []
            what = set()
            per_rank: dict[int, dict[str, object] | None] = {}
            for r in present:
                t_, s_, i_ = seqs[r]
                if first < t_.size:
                    key = _describe(int(t_[first]), int(s_[first]))
                    ids.append(int(i_[first]))
                    per_rank[r] = {
                        "comm_type": collective_name(int(t_[first])),
                        "comm_size": int(s_[first]),
                        "node_id": int(i_[first]),
                    }
                    if first < rt.size:
                        if t_[first] != rt[first]:
                            what.add("comm_type")
                        if s_[first] != rs[first] and VARIES not in (int(s_[first]), int(rs[first])):
                            what.add("comm_size")
                else:
                    key = f"nothing (only {count_noun(int(t_.size), 'collective')})"
                    per_rank[r] = None
                by.setdefault(key, []).append(r)
            parts = "; ".join(f"{_rank_list(rs_)}: {k}" for k, rs_ in by.items())
            issues.append(
                Issue(
                    ERROR,
                    "group-mismatch",
                    1,
                    f"{label(g)}: collective #{first} differs in {' and '.join(sorted(what))}: {parts}",
                    ids[:SAMPLE],
                    None,
                    False,
                    {"group": g, "position": first, "differs": sorted(what), "ranks": per_rank},
                )
            )
        lens = {r: int(seqs[r][0].size) for r in present}
        if len(set(lens.values())) > 1:
            by_len: dict[int, list[int]] = {}
            for r, k in lens.items():
                by_len.setdefault(k, []).append(r)
            parts = "; ".join(f"{_rank_list(rs_)}: {k:,}" for k, rs_ in sorted(by_len.items()))
            issues.append(
                Issue(
                    ERROR,
                    "group-count-mismatch",
                    len(set(lens.values())),
                    f"{label(g)}: ranks issue different numbers of collectives: {parts}",
                    [],
                    None,
                    False,
                    {"group": g, "lengths": {str(r): k for r, k in lens.items()}},
                )
            )
    return issues


def _p2p(t: Trace, rank: int) -> tuple[tuple, tuple]:
    """The sends and the receives of one rank that name their peer, as (rank, peer, tag, size,
    node id, row) columns: `p2p_rows` plus what validation reports (size, node id)."""
    p = p2p_rows(t, rank)
    rows, is_recv = p["row"], p["recv"]
    named = np.where(is_recv, t.has(Attr.COMM_SRC)[rows], t.has(Attr.COMM_DST)[rows])
    size = np.where(t.has(Attr.COMM_SIZE), t.comm_size, -1)[rows].astype(np.int64)
    out = []
    for recv, peer in ((False, p["dst"]), (True, p["src"])):
        m = named & (is_recv == recv)
        out.append((np.full(int(m.sum()), rank, np.int64), peer[m], p["tag"][m], size[m], t.ids[rows[m]], rows[m]))
    return out[0], out[1]


def _check_p2p(workload) -> list[Issue]:
    issues: list[Issue] = []
    ranks = np.array(workload.ranks, np.int64)
    sends, recvs = [], []
    for r in workload.ranks:
        t = workload.traces[r]
        send, recv = _p2p(t, r)
        sends.append(send)
        recvs.append(recv)
    if not sends:
        return issues
    cat = lambda parts: [np.concatenate([p[j] for p in parts]) for j in range(6)]  # noqa: E731
    s_rank, s_peer, s_tag, s_size, s_id, s_row = cat(sends)
    r_rank, r_peer, r_tag, r_size, r_id, r_row = cat(recvs)
    if not s_rank.size and not r_rank.size:
        return issues
    # peers that are not in the workload
    for name, rk, peer, ids, word in (("send", s_rank, s_peer, s_id, "to"), ("recv", r_rank, r_peer, r_id, "from")):
        bad = ~np.isin(peer, ranks) & (peer >= 0)
        for r, m in _split_by(rk, bad):
            issues.append(
                Issue(
                    ERROR,
                    "unknown-peer",
                    int(m.size),
                    f"{count_noun(int(m.size), 'COMM_' + name.upper() + ' node')} {word} "
                    f"{_rank_list(np.unique(peer[m]).tolist())}, not in the workload",
                    sample_ids(ids[m]),
                    r,
                    False,
                    {"kind": name, "peers": np.unique(peer[m]).tolist()[:SAMPLE]},
                )
            )
    # match in order per (src, dst, tag): the k-th send with a key pairs with the k-th receive
    s_ok = np.isin(s_peer, ranks)
    r_ok = np.isin(r_peer, ranks)
    S = (s_rank[s_ok], s_peer[s_ok], s_tag[s_ok], s_size[s_ok], s_id[s_ok], s_row[s_ok])
    R = (r_peer[r_ok], r_rank[r_ok], r_tag[r_ok], r_size[r_ok], r_id[r_ok], r_row[r_ok])  # as (src, dst, ...)

    ns, nr = S[0].size, R[0].size
    cat2 = lambda a, b: np.concatenate([a, b])  # noqa: E731
    kind = np.concatenate([np.zeros(ns, bool), np.ones(nr, bool)])
    snd, rcv = pair_p2p(cat2(S[0], R[0]), cat2(S[1], R[1]), cat2(S[2], R[2]), cat2(S[5], R[5]), kind)
    matched = np.zeros(ns + nr, bool)
    matched[snd] = True
    matched[rcv] = True
    sm, rm = matched[:ns], matched[ns:]
    # sizes of matched pairs
    ps, pr = snd, rcv - ns
    diff = S[3][ps] != R[3][pr]
    if diff.any():
        ex = [
            f"rank {int(S[0][a])} → {int(S[1][a])} tag {int(S[2][a])}: send {_bytes(int(S[3][a]))} (node "
            f"{int(S[4][a])}), recv {_bytes(int(R[3][b]))} (node {int(R[4][b])})"
            for a, b in zip(ps[diff][:3], pr[diff][:3])
        ]
        issues.append(
            Issue(
                ERROR,
                "p2p-size-mismatch",
                int(diff.sum()),
                f"{count_noun(int(diff.sum()), 'send/receive pair', 'disagree')} on comm_size: " + "; ".join(ex),
                sample_ids(S[4][ps[diff]]),
                None,
                False,
                {
                    "pairs": [
                        {
                            "src": int(S[0][a]),
                            "dst": int(S[1][a]),
                            "tag": int(S[2][a]),
                            "send_node": int(S[4][a]),
                            "recv_node": int(R[4][b]),
                            "send_size": int(S[3][a]),
                            "recv_size": int(R[3][b]),
                        }
                        for a, b in zip(ps[diff][:SAMPLE], pr[diff][:SAMPLE])
                    ]
                },
            )
        )
    for code, X, m, own, word, other in (
        ("unmatched-send", S, ~sm, 0, "COMM_SEND", "receive"),
        ("unmatched-recv", R, ~rm, 1, "COMM_RECV", "send"),
    ):
        for r, mr in _split_by(X[own], m):
            chans, per_chan = np.unique(np.stack([X[1 - own][mr], X[2][mr]]), axis=1, return_counts=True)
            desc = []
            for (peer, tag), k in zip(chans.T[:3].tolist(), per_chan[:3].tolist()):
                desc.append(f"{k:,} {'to' if own == 0 else 'from'} rank {peer} tag {tag}")
            more = f", … ({chans.shape[1] - 3} more channels)" if chans.shape[1] > 3 else ""
            issues.append(
                Issue(
                    ERROR,
                    code,
                    int(mr.size),
                    f"{count_noun(int(mr.size), word + ' node', 'have')} no matching {other} "
                    f"(matched in order per source, destination and tag): {'; '.join(desc)}{more}",
                    sample_ids(X[4][mr]),
                    r,
                    False,
                    {"channels": [{"peer": int(p), "tag": int(tg)} for p, tg in chans.T[:SAMPLE].tolist()]},
                )
            )
    return issues


def _split_by(key: np.ndarray, mask: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(value, positions in ascending order) for each value of `key` where `mask` holds, values
    ascending: one sort, where a mask per value costs values x length."""
    idx = np.flatnonzero(mask)
    idx = idx[np.argsort(key[idx], kind="stable")]
    cuts = np.flatnonzero(np.diff(key[idx])) + 1
    return [(int(key[part[0]]), part) for part in np.split(idx, cuts)] if idx.size else []
