"""What Triton compiles for one launch (:class:`Spec`, :func:`signature_of`), and the cheap key of a
launch's values that gives the same signature (:func:`launch_key`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Spec:
    """What Triton compiles for one launch: its ``signature`` (name -> type string such as
    ``*fp32``, ``i32``, ``fp32``, ``constexpr``), ``constexprs`` (name -> value, including ints
    equal to 1, which Triton's launcher specialises), and ``attrs`` (parameter index ->
    ``[["tt.divisibility", 16]]`` for pointers 16-byte aligned and ints divisible by 16, as the
    launcher specialises them)."""

    signature: dict
    constexprs: dict
    attrs: dict = field(default_factory=dict)

    def key(self) -> tuple:
        return (tuple(self.signature.items()), tuple(sorted((k, repr(v)) for k, v in self.constexprs.items())),
                tuple(sorted(self.attrs)))

    def describe(self) -> str:
        """``*fp32 pointers, CAUSAL=True, BLOCK_M=16``: the dtypes and constexprs, for messages."""
        ptrs = sorted({t for t in self.signature.values() if t.startswith("*")})
        parts = [f"{'/'.join(ptrs)} pointers"] if ptrs else []
        parts += [f"{k}={v}" for k, v in self.constexprs.items()]
        return ", ".join(parts)


def _pointer_type(dtype) -> str:
    import torch

    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
             torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
             torch.bool: "i1"}
    for attr, name in (("float8_e4m3fn", "fp8e4nv"), ("float8_e5m2", "fp8e5"), ("float8_e4m3fnuz", "fp8e4b8"),
                       ("float8_e5m2fnuz", "fp8e5b16")):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = name
    if dtype not in names:
        raise TypeError(f"no Triton pointer type for a tensor of dtype {dtype}")
    return "*" + names[dtype]


def python_function(kernel):
    """The plain Python function behind a ``@triton.jit`` kernel (interpreted or compiled)."""
    return getattr(kernel, "fn", kernel)


def no_specialize(kernel, names: list[str]) -> set[str]:
    """Parameters the kernel asked Triton not to specialise (``do_not_specialize=``)."""
    raw = getattr(kernel, "do_not_specialize", None)
    if raw is None:
        raw = getattr(kernel, "kwargs", {}).get("do_not_specialize")
    return {names[x] if isinstance(x, int) else x for x in (raw or ())}


def signature_of(kernel, args, constexprs) -> Spec:
    """The Triton signature of ``kernel[grid](*args, **constexprs)``, derived from the values.

    Tensors become pointers by dtype (``*fp32``, ``*bf16``, ``*fp8e4nv``...); Python ints
    ``i32`` (or ``i64`` past 32 bits), 1 a constexpr; floats ``fp32``; bools ``u1``; ``None`` and
    parameters annotated ``tl.constexpr`` constexprs with the value given. Pointers whose address
    is a multiple of 16 bytes and ints divisible by 16 get Triton's divisibility hint, as its
    launcher gives them (which changes vectorisation, so resources match a real launch).

    Raises:
        TypeError: the arguments do not fit the kernel's parameters (named as a call would), or a
            value has no Triton type.
    """
    fn = python_function(kernel)
    sig = inspect.signature(fn)
    try:
        bound = sig.bind(*args, **constexprs)
    except TypeError as exc:
        raise TypeError(f"{fn.__name__}{sig}: the launch does not fit the kernel's parameters: {exc}") from None
    bound.apply_defaults()
    names = list(sig.parameters)
    frozen = no_specialize(kernel, names)
    signature, consts, attrs = {}, {}, {}
    for i, (name, value) in enumerate(bound.arguments.items()):
        param = sig.parameters[name]
        annotated = "constexpr" in str(param.annotation)
        if annotated or value is None:
            signature[name], consts[name] = "constexpr", value
            continue
        divisible = False
        if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
            signature[name] = _pointer_type(value.dtype)
            divisible = value.data_ptr() % 16 == 0
        elif isinstance(value, bool):
            signature[name] = "u1"
        elif isinstance(value, int):
            if value == 1 and name not in frozen:
                signature[name], consts[name] = "constexpr", 1
                continue
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64" if value < 2**63 else "u64"
            divisible = value % 16 == 0
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} is a {type(value).__name__}; a kernel takes "
                            f"tensors, ints, floats, bools or tl.constexpr values")
        if divisible and name not in frozen:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return Spec(signature, consts, attrs)


#: id(python function) -> (the function, its parameters' names, which are constexprs, do_not_specialize)
_PARAMS: dict[int, tuple] = {}


def launch_key(kernel, args, constexprs) -> tuple:
    """What :func:`signature_of` reads from a launch's values, without binding them: per argument its
    kind, pointer dtype and 16-byte alignment, an int's width, divisibility and equality to 1, and the
    value of every constexpr. Equal keys give equal signatures for the same kernel."""
    fn = python_function(kernel)
    info = _PARAMS.get(id(fn))
    if info is None or info[0] is not fn:
        params = inspect.signature(fn).parameters
        names = list(params)
        info = (fn, names, tuple("constexpr" in str(p.annotation) for p in params.values()),
                frozenset(no_specialize(kernel, names)))
        _PARAMS[id(fn)] = info
    _, names, is_const, frozen = info

    def one(name, const, value):
        if const or value is None:
            # a float by repr: -0.0 == 0.0 (and hash alike) but a kernel may branch on its sign; nan != nan
            return ("c", type(value), value if isinstance(value, (int, str, bool)) else repr(value))
        if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
            return ("p", value.dtype, value.data_ptr() % 16 == 0)
        if isinstance(value, bool):
            return ("b",)
        if isinstance(value, int):
            return ("i", value == 1 and name not in frozen, -2**31 <= value < 2**31, value < 2**63, value % 16 == 0)
        return (type(value),)

    key = [one(names[i] if i < len(names) else None, i < len(names) and is_const[i], v) for i, v in enumerate(args)]
    key += [(k, one(k, k in names and is_const[names.index(k)], v)) for k, v in sorted(constexprs.items())]
    return tuple(key)
