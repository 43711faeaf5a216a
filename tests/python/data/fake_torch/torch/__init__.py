"""A stand-in for PyTorch, for the `pinned` experiment's PyTorch rows on machines without it: the
calls memcost.pinning_torch makes, doing nothing. Its rows' figures are nobody's; the tests check
only that the rows are run, one process a round, and kept apart from the rounds."""

uint8 = "uint8"


class _Tensor:
    def __getitem__(self, index):
        return self

    def copy_(self, other):
        return self


class cuda:  # noqa: N801 - torch.cuda
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def init():
        pass

    @staticmethod
    def synchronize():
        pass


class _C:  # noqa: N801 - torch._C
    @staticmethod
    def _host_emptyCache():
        pass


def empty(size, dtype=None, pin_memory=False, device=None):
    return _Tensor()
