"""Model sizes by name (small, medium, ... from configs/models/*.toml), for tables and plots.

    from model_names import model_name
    model_name(1600, 48)  # "xl"
"""
import functools
import glob
import os
import re

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models")


@functools.lru_cache(maxsize=None)
def _names():
    """{(d_model, num_layers): name}, in the configs' order of size."""
    out = {}
    for path in glob.glob(os.path.join(CONFIGS, "*.toml")):
        with open(path) as f:
            text = f.read()
        d = re.search(r"^d_model\s*=\s*(\d+)", text, re.M)
        n = re.search(r"^num_layers\s*=\s*(\d+)", text, re.M)
        if d and n:
            out[(int(d.group(1)), int(n.group(1)))] = os.path.basename(path)[:-5]
    return out


def model_name(d_model, num_layers=None):
    """The config's name for a model shape; with d_model alone, the one size of that width.
    A shape no config has: "d_model x layers"."""
    d = int(float(d_model))
    if num_layers is not None:
        n = int(float(num_layers))
        return _names().get((d, n), f"{d} x {n}")
    names = [name for (dm, _), name in _names().items() if dm == d]
    return names[0] if len(names) == 1 else f"d_model {d}"


def model_shape(name):
    """(d_model, num_layers) of a config by name."""
    for shape, known in _names().items():
        if known == name:
            return shape
    raise KeyError(f"no configs/models/{name}.toml")


def size_order(name):
    """Sort key: smaller models first (by d_model, then layers); unknown names last."""
    for (d, n), known in _names().items():
        if known == name:
            return (0, d, n)
    return (1, 0, 0)
