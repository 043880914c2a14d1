"""Recording PyTorch execution traces and Kineto traces of chosen training steps."""
