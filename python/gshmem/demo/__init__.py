"""The main job, ``python -m gshmem.demo [attention|p2p]`` (README): one PE per local GPU.

``attention`` (the default) runs context-parallel ring attention over every GPU, checks it
against attention on one GPU and times it against the NCCL transport; ``p2p`` puts and gets
random data between neighbours. Started plainly, the demo launches itself with
``python -m gshmem.run``; under any launcher ``gshmem.init()`` knows, each process is one PE.
"""
