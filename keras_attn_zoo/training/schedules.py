"""Learning-rate schedules: `InverseSquareRootSchedule` lives in `keras_attn_zoo.optimizers`
(a low rank, so evaluation can use it); this module keeps the training import path."""

from keras_attn_zoo.optimizers import InverseSquareRootSchedule

__all__ = ["InverseSquareRootSchedule"]
