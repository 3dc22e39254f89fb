# `make train` and `make test` are `./run train` and `./run test` (./run needs no make).
.PHONY: train test setup
train:
	./run train
test:
	./run test
setup:
	./run setup
