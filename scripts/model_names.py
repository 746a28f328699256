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
def _shapes():
    """{name: (d_model, num_layers, d_ff)} of every config."""
    out = {}
    for path in sorted(glob.glob(os.path.join(CONFIGS, "*.toml"))):
        with open(path) as f:
            text = f.read()
        keys = [re.search(rf"^{k}\s*=\s*(\d+)", text, re.M) for k in ("d_model", "num_layers", "d_ff")]
        if all(keys):
            out[os.path.basename(path)[:-5]] = tuple(int(k.group(1)) for k in keys)
    return out


@functools.lru_cache(maxsize=None)
def _names():
    """{(d_model, num_layers): name}, for the shapes that one config alone has (gpt2-small shares
    small's width and depth, with another d_ff: such names need d_ff to tell them apart)."""
    count = {}
    for d, n, _ in _shapes().values():
        count[(d, n)] = count.get((d, n), 0) + 1
    return {(d, n): name for name, (d, n, _) in _shapes().items() if count[(d, n)] == 1}


def model_name(d_model, num_layers=None, d_ff=None):
    """The config's name for a model shape (d_ff tells apart configs of one width and depth);
    with d_model alone, the one size of that width. A shape no config has: "d_model x layers"."""
    d = int(float(d_model))
    if num_layers is not None:
        n = int(float(num_layers))
        if d_ff is not None:
            f = int(float(d_ff))
            for name, shape in _shapes().items():
                if shape == (d, n, f):
                    return name
        return _names().get((d, n), f"{d} x {n}")
    names = [name for name, (dm, _, _) in _shapes().items() if dm == d]
    return names[0] if len(names) == 1 else f"d_model {d}"


def model_shape(name):
    """(d_model, num_layers) of a config by name."""
    if name not in _shapes():
        raise KeyError(f"no configs/models/{name}.toml")
    return _shapes()[name][:2]


def size_order(name):
    """Sort key: smaller models first (by d_model, then layers); unknown names last."""
    if name not in _shapes():
        return (1, 0, 0)
    return (0,) + _shapes()[name][:2]
