"""Kernel names as Nsight Compute filters: a ``--kernel-name-base`` and a ``regex:`` that select one kernel.

PyTorch's profiler and ncu demangle C++ kernel names differently (``(int)4`` or
``4``, ``(anonymous namespace)`` or ``<unnamed>``, placeholders ``T1`` for
parameter types), so a template instantiation is matched by its identifier and
the words and numbers of its template arguments in order, not by the whole name.
Used by the kernel collector to build commands and by the kernel analyzers to
show them, and by :func:`same_kernel`, which joins an ncu result to the trace's kernel.
"""

from __future__ import annotations

import re

__all__ = ["kernel_filter", "kernel_identifier", "same_kernel"]

#: Words that differ between demanglers or say nothing about the instantiation.
_NOISE = frozenset({"void", "const", "volatile", "lambda", "instance", "operator", "unnamed", "anonymous",
                    "namespace", "type", "enable_if"})
_BUILTIN_CAST = re.compile(r"\((unsigned |signed )?(long long|long|int|short|char|bool)\)(?=-?\d)")
_GROUP = re.compile(r"\([^()]*\)")
#: after the last template argument: closing brackets, then the parameter list
_END = "[^0-9A-Za-z_(]*>\\("


def _drop_signatures(args: str) -> str:
    """Remove nested parameter lists (``(at::TensorIteratorBase &, const T1 &)``): one demangler writes
    placeholders (T1) where the other writes types. Lambda parameters (``lambda(float)``) stay."""
    while True:
        changed = False
        for m in reversed(list(_GROUP.finditer(args))):
            if re.search(r"[&*]|\bconst\b|\bT\d+\b", m.group()):
                args = args[: m.start()] + " " + args[m.end():]
                changed = True
        if not changed:
            return args


def _arg_tokens(args: str) -> list[str]:
    """The template arguments as regex pieces, each matched anywhere after the previous one.

    Numbers are written ``4``, ``(int)4`` or ``4ul``, booleans ``true`` or ``(bool)1``, anonymous
    namespaces ``(anonymous namespace)`` or ``<unnamed>``, depending on the demangler.
    """
    args = re.sub(r"\(bool\)1", "true", re.sub(r"\(bool\)0", "false", args))
    args = _drop_signatures(_BUILTIN_CAST.sub("", args).replace("(anonymous namespace)", ""))
    tokens: list[str] = []
    for word in re.findall(r"[A-Za-z_]\w*|\d+[uUlL]*", args):
        if word in _NOISE or re.fullmatch(r"T\d+", word):
            continue
        if word[0].isdigit():
            tokens.append(f"(.*[^0-9A-Za-z_])?{word.rstrip('uUlL')}[uUlL]*")
        else:
            tokens.append(".*" + {"true": "(true|1)", "false": "(false|0)"}.get(word, word))
    return tokens


def _template_part(name: str) -> tuple[str, str]:
    """``void ns::f<A, B<C>>(int)`` -> (``f``, ``A, B<C>``): the function identifier and its template arguments.

    The parameter list is the first ``(`` outside angle brackets; the template arguments are the
    bracketed part just before it, so a templated return type (``std::enable_if<...>::type``) is skipped.
    """
    name = name.replace("(anonymous namespace)", "anonymous")
    depth, paren = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name[:i].rstrip().endswith("operator"):
            paren = i
            break
    head = name[:paren].rstrip()
    args = ""
    if head.endswith(">"):
        depth = 0
        for i in range(len(head) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(head[i], 0)
            if depth == 0:
                args, head = head[i + 1:-1], head[:i]
                break
    func = re.split(r"[\s:]+", head.strip())[-1] if head.strip() else name
    return func, args


def kernel_filter(name: str) -> tuple[str, str]:
    """(``--kernel-name-base``, ``regex:...`` value) that selects this kernel and not its siblings.

    - a plain C name (cuBLAS, CUTLASS, Triton, torch.compile kernels): the whole name on the
      ``function`` base, anchored;
    - a mangled name: anchored on the ``mangled`` base;
    - a C++ function without template arguments: its identifier on the ``function`` base;
    - a template instantiation (``at::native::vectorized_elementwise_kernel<4, MulFunctor<float>>``):
      the identifier and the words and numbers of its template arguments, in order, up to the
      parameter list, on the ``demangled`` base (see :func:`_arg_tokens`).
    """
    if re.fullmatch(r"\w+", name):
        return ("mangled" if name.startswith("_Z") else "function"), f"regex:^{name}$"
    func, args = _template_part(name)
    if not args:
        return "function", f"regex:^{re.escape(func)}$"
    pattern = f"(^|[^0-9A-Za-z_]){re.escape(func)}<" + "".join(_arg_tokens(args)) + _END
    return "demangled", f"regex:{pattern}"


def kernel_identifier(name: str) -> str:
    """The function identifier of a kernel name (``f`` of ``void ns::f<A>(int)``), for file names."""
    return name if re.fullmatch(r"\w+", name) else _template_part(name)[0]


def _mangled_identifier(name: str) -> str:
    """The function identifier of an Itanium-mangled name: the last source name before its template
    arguments (``I``) or parameters (``_ZN2at6native29vectorized_elementwise_kernelILi4E...`` -> the kernel)."""
    i, last = 2, ""
    if name[i:i + 1] == "N":
        i += 1
    while i < len(name):
        while i < len(name) and name[i] in "LKVr":  # internal linkage, cv-qualifiers
            i += 1
        m = re.match(r"\d+", name[i:])
        if not m:
            break
        size = int(m.group())
        i += len(m.group())
        last = name[i:i + size]
        i += size
        if name[i:i + 1] != "" and name[i] not in "0123456789LKVr":
            break
    return last or name


def _identifier(name: str) -> str:
    name = name.strip()
    if name.startswith("_Z"):
        return _mangled_identifier(name)
    if _cut(name):  # the identifier is before the template arguments ncu cut short
        head = name.rstrip(".").split("<", 1)[0]
        return re.split(r"[\s:]+", head.strip())[-1] if head.strip() else name
    return kernel_identifier(name)


def _cut(name: str) -> bool:
    return name.endswith("...") or name.count("<") != name.count(">")


def same_kernel(trace_name: str, ncu_kernel: str, ncu_function: str = "") -> bool:
    """Whether an ncu result (its ``Kernel Name`` and ``Function Name``) is the kernel the trace calls
    ``trace_name``.

    The PyTorch profiler writes demangled full names; ncu writes the demangled name (possibly cut short),
    the bare function name, or the mangled name, depending on the report and the export. So:

    1. equal names match;
    2. the function identifiers (the name without scope, template arguments and parameters; read from the
       mangling for a ``_Z`` name) must be equal;
    3. where both sides carry template arguments, they must agree as the ncu filter does
       (:func:`kernel_filter`: the words and numbers of the arguments, in order); a name ncu cut short
       (``...`` or unbalanced brackets) is compared on what it keeps, as a prefix;
    4. a side without template arguments (a bare function name, a mangled name) cannot tell instantiations
       apart, so the identifier decides.
    """
    trace_name, ncu_kernel, ncu_function = trace_name.strip(), (ncu_kernel or "").strip(), \
        (ncu_function or "").strip()
    if not trace_name or not (ncu_kernel or ncu_function):
        return False
    if trace_name in (ncu_kernel, ncu_function):
        return True
    ident = _identifier(trace_name)
    if ident not in {_identifier(n) for n in (ncu_kernel, ncu_function) if n}:
        return False
    _, trace_args = _template_part(trace_name) if not trace_name.startswith("_Z") else ("", "")
    demangled = ncu_kernel if ncu_kernel and not ncu_kernel.startswith("_Z") else ""
    if not trace_args or not demangled or "<" not in demangled:
        return True
    if _cut(demangled):
        kept = demangled.rstrip(".").rstrip()
        return _kept_prefix(trace_name, kept)
    base, regex = kernel_filter(trace_name)
    return base != "demangled" or re.search(regex[len("regex:"):], demangled) is not None


def _kept_prefix(trace_name: str, kept: str) -> bool:
    """A name ncu cut short matches when the words and numbers it keeps begin the trace name's."""
    words = re.findall(r"[A-Za-z_]\w*|\d+", _BUILTIN_CAST.sub("", kept.replace("(anonymous namespace)", "")))
    full = re.findall(r"[A-Za-z_]\w*|\d+", _BUILTIN_CAST.sub("", trace_name.replace("(anonymous namespace)", "")))
    words = [w for w in words if w not in _NOISE]
    full = [w for w in full if w not in _NOISE]
    if not words or len(full) < len(words):
        return False
    # the last word kept may itself be cut (``FillFunc`` of ``FillFunctor``)
    return full[:len(words) - 1] == words[:-1] and full[len(words) - 1].startswith(words[-1])
