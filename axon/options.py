"""Parsing of the values users type on the command line (shared by every command, below all layers).

>>> parse_shape_option("M=4096,K=1024")
{'M': 4096, 'K': 1024}
"""

from __future__ import annotations

from axon.errors import SpecError


def parse_shape_option(text: str | None) -> dict[str, int]:
    """`M=4096,K=1024` -> {"M": 4096, "K": 1024}; SpecError on anything else."""
    if not text:
        return {}
    out: dict[str, int] = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or not name.strip().isidentifier() or not value.strip().isdigit() or int(value) < 1:
            # `axon show W --shape M=128..256` (or M=128,256) named no reason: only `axon tune` takes families
            family = ".." in item or (not sep and item.strip().isdigit())
            raise SpecError(
                f"malformed --shape {text!r}: expected NAME=POSITIVE_INT[,NAME=...], e.g. M=4096,K=1024"
                + ("; a range or list of sizes (a kernel family) is for `axon tune` only" if family else "")
            )
        if name.strip() in out:
            raise SpecError(f"malformed --shape {text!r}: dimension {name.strip()!r} is given twice")
        out[name.strip()] = int(value)
    return out


def parse_shape_range(text: str | None, max_shapes: int = 256) -> dict[str, tuple[int, ...]]:
    """`M=512..2048:512,K=1024` -> {"M": (512, 1024, 1536, 2048), "K": (1024,)}; a list `M=512,1024`
    gives those values. A range without `:step` steps by 128 (a partition's rows); its end is served
    even when the step does not land on it.

    >>> parse_shape_range("M=512..1024:256,K=64")
    {'M': (512, 768, 1024), 'K': (64,)}
    >>> parse_shape_range("M=1..300")
    {'M': (1, 129, 257, 300)}
    >>> parse_shape_range("S=512,1024,4096")
    {'S': (512, 1024, 4096)}
    """
    if not text:
        return {}
    hint = "expected NAME=LO..HI[:STEP] or NAME=V1,V2,... (positive integers), e.g. M=512..8192:512"
    out: dict[str, list[int]] = {}
    collapsed: list[str] = []  # ranges that hold one shape at their step, said once the syntax is checked
    name = ""
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if sep:
            name = key.strip()
            if not name.isidentifier() or name in out:
                raise SpecError(f"malformed --shape {text!r}: bad or repeated name {name!r}; {hint}")
            out[name] = []
        elif not name:
            raise SpecError(f"malformed --shape {text!r}: {hint}")
        else:
            value = key
        seen = set(out[name])
        for v in _values(text, value.strip(), hint, collapsed, max_shapes):
            if v in seen:  # M=128,128: one shape, which then read as a malformed single shape
                raise SpecError(f"malformed --shape {text!r}: {name}={v} is given twice")
            out[name].append(v)
            seen.add(v)
    if collapsed:
        raise SpecError(collapsed[0])
    for name, values in out.items():
        if not values:
            raise SpecError(f"--shape {text!r}: the range of {name} is empty")
    total = 1
    for values in out.values():
        total *= len(set(values))
    if total > max_shapes:
        raise SpecError(f"--shape {text!r} spans {total} shapes; at most {max_shapes} (raise the step)")
    return {k: tuple(sorted(set(v))) for k, v in out.items()}


def _values(text: str, value: str, hint: str, collapsed: list[str], max_shapes: int) -> list[int]:
    lo, dots, rest = value.partition("..")
    if not dots:
        if not value.isdigit() or int(value) < 1:
            raise SpecError(f"malformed --shape {text!r}: {value!r} is not a positive integer; {hint}")
        return [int(value)]
    hi, colon, step = rest.partition(":")
    step = step if colon else "128"
    if not (lo.isdigit() and hi.isdigit() and step.isdigit()) or min(int(lo), int(step)) < 1:
        raise SpecError(f"malformed --shape {text!r}: range {value!r}; {hint}")
    if int(hi) < int(lo):
        raise SpecError(f"--shape {text!r}: the range {value!r} is empty (its end is below its start)")
    span = range(int(lo), int(hi) + 1, int(step))
    if len(span) > max_shapes:  # refused before it is listed: M=1..10**12:1 would exhaust the machine
        raise SpecError(f"--shape {text!r} spans at least {len(span)} shapes; at most {max_shapes} (raise the step)")
    values = list(span)
    if len(values) == 1 and int(hi) > int(lo):  # M=1..4 steps by 128: only M=1, not the range meant
        collapsed.append(
            f"--shape {text!r}: the range {value!r} holds one shape ({lo}) at step {step}"
            f"{'' if colon else ' (the default step)'}: give a smaller step, e.g. {lo}..{hi}:{int(hi) - int(lo)}, "
            "or a single value"
        )
    elif values[-1] != int(hi):  # M=1..1000 asks for M=1000 too: the step stops at 897
        values.append(int(hi))
    return values


def format_sizes(sizes: object) -> str:
    """One dimension's size, or its sizes as `--shape` takes them: evenly spaced ones as a range
    (128..2048:128, sixteen sizes), others as a list (1,100,129).

    >>> format_sizes([128, 256, 384]), format_sizes([1, 100, 129]), format_sizes(512)
    ('128..384:128', '1,100,129', '512')
    """
    if not isinstance(sizes, (list, tuple)):
        return str(sizes)
    steps = {b - a for a, b in zip(sizes, sizes[1:])}
    if len(sizes) > 2 and len(steps) == 1 and sizes[1] > sizes[0]:
        return f"{sizes[0]}..{sizes[-1]}:{sizes[1] - sizes[0]}"
    return ",".join(map(str, sizes))
