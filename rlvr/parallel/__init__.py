"""Data parallelism: ranks and their collectives (`distributed`), FSDP sharding of the decoder layers
(`fsdp`), and the tensor helpers both the model code and the trainer use on sharded weights (`sharding`).
"""
