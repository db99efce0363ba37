"""Losses, schedules, strategy selection and the training loop."""

from keras_attn_zoo.training.callbacks import default_callbacks
from keras_attn_zoo.training.losses import LabelSmoothedCrossEntropy
from keras_attn_zoo.training.losses import token_loss_sum
from keras_attn_zoo.training.schedules import InverseSquareRootSchedule
from keras_attn_zoo.training.seeding import seed_everything
from keras_attn_zoo.training.strategy import select_strategy
from keras_attn_zoo.training.trainer import Trainer
from keras_attn_zoo.training.trainer import TrainingSummary
from keras_attn_zoo.training.simplex import BranchWeightAdam
from keras_attn_zoo.training.simplex import BranchWeightHistory
from keras_attn_zoo.training.simplex import SimplexProjection
from keras_attn_zoo.training.simplex import port_branch_weight_schedule
from keras_attn_zoo.training.simplex import project_onto_simplex
