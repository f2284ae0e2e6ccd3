"""Typed config arguments: types, strict booleans, named unknown keys."""
import pytest

from jaxpapers.core import config as config_lib


def test_types_are_taken_from_defaults():
  c = config_lib.parse_arg("depth=8,lr=0.5,order=reverse,smoke=true,widths=1+2",
                           depth=4, lr=0.1, order="forward", smoke=False, widths=(3,))
  assert (c.depth, c.lr, c.order, c.smoke, c.widths) == (8, 0.5, "reverse", True, (1, 2))
  assert isinstance(c.lr, float)


def test_bare_boolean_key_means_true():
  assert config_lib.parse_arg("smoke", smoke=False).smoke is True


@pytest.mark.parametrize("text", ["True1", "maybe", "2"])
def test_booleans_are_strict(text):
  with pytest.raises(ValueError, match="true/false"):
    config_lib.parse_arg(f"smoke={text}", smoke=False)


def test_unknown_key_is_named():
  with pytest.raises(ValueError, match="'dpeth'.*known args: depth"):
    config_lib.parse_arg("dpeth=3", depth=4)


def test_bad_int_is_named():
  with pytest.raises(ValueError, match="'depth'"):
    config_lib.parse_arg("depth=four", depth=4)


def test_override_rejects_unknown_dotted_key():
  c = config_lib.parse_arg("", a=1)
  c.optim = config_lib.parse_arg("", lr=0.1)
  assert config_lib.override(c, {"optim.lr": 0.5}).optim.lr == 0.5
  with pytest.raises(KeyError, match="optim.lrr"):
    config_lib.override(c, {"optim.lrr": 0.5})


def test_locked_config_rejects_new_keys_by_name():
  c = config_lib.lock(config_lib.parse_arg("", depth=4))
  c.depth = 8  # existing keys stay writable
  with pytest.raises(AttributeError, match="dpeth"):
    c.dpeth = 3


def test_smoke_args_apply_first_and_explicit_args_win():
  kw = dict(smoke_args=dict(steps=6, batch_size=16), smoke=False, steps=600,
            batch_size=128, lr=0.1)
  c = config_lib.parse_arg("batch_size=4,smoke", **kw)
  assert (c.steps, c.batch_size, c.lr) == (6, 4, 0.1)
  c = config_lib.parse_arg("smoke,batch_size=4", **kw)
  assert (c.steps, c.batch_size) == (6, 4)
  assert config_lib.parse_arg("batch_size=4", **kw).steps == 600  # no smoke: untouched
  with pytest.raises(ValueError, match="'stpes'"):
    config_lib.parse_arg("smoke", smoke_args=dict(stpes=1), smoke=False, steps=1)


def test_paper_args_apply_like_smoke_args_and_exclude_smoke():
  kw = dict(smoke_args=dict(steps=6), paper_args=dict(steps=10 ** 5, width=2048),
            smoke=False, paper=False, steps=600, width=16)
  c = config_lib.parse_arg("paper", **kw)
  assert (c.steps, c.width) == (10 ** 5, 2048)
  c = config_lib.parse_arg("steps=100,paper", **kw)
  assert (c.steps, c.width) == (100, 2048)
  with pytest.raises(ValueError, match="exclude each other"):
    config_lib.parse_arg("paper,smoke", **kw)


def test_stompp_smoke_respects_explicit_batch_size():
  c = config_lib.load("configs/stompp.py:smoke,batch_size=4")
  assert (c.train.batch_size, c.train.steps, c.model.name) == (4, 6, "mlp")


def test_load_names_a_missing_config():
  with pytest.raises(FileNotFoundError, match="configs/nosuch.py"):
    config_lib.load("configs/nosuch.py:smoke")
