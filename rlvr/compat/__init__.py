"""Other projects' APIs on top of `rlvr.core`: names, signatures and semantics as they define them.

`rlvr.compat.cs336`: Stanford CS336 assignment 5 (alignment and reasoning RL). The training
loop never imports this package; it uses the core functions, whose edge cases are the safe ones.
"""
