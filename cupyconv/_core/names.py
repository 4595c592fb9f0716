"""The names that error messages give the arguments: the caller's own.

cupyconv's checks (geometry, operands, the passes, the warm path's overlap check) name arguments
in cupyconv's vocabulary: the parameters of the function that runs (``x``, ``w``, ``bias``,
``out``, ``dy``, ``input_shape``, ``padding``, ``layout`` ...) and the roles of the shapes in a
convolution (``input``, ``weight``, ``output``).  A module that mirrors another API --
:mod:`cupyconv.cudnn` speaks CuPy 13's ``W``, ``b``, ``y``, ``gy``, ``gW``, ``pad``,
``d_layout`` -- runs cupyconv's functions inside :func:`spoken_as` with a map from cupyconv's
names to its caller's, and every message built meanwhile names the argument as the caller wrote
it.  The checks pass cupyconv's names along and translate them only where a message is built
(:func:`arg`); no message is rewritten after the fact.

The map travels in a context variable rather than as a parameter of every check: it must reach
messages built several layers down (a public function, its operands, the geometry, ``per_dim``,
``as_int``) and on the warm path (a prepared call's overlap check), and it is a property of the
call site, not of the problem (a geometry memoized for one caller serves the other).  Context
variables are per thread and per asyncio task, so concurrent calls do not see each other's
names; the map is read only when a message is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

_NO_NAMES: Mapping[str, str] = MappingProxyType({})
_NAMES: ContextVar[Mapping[str, str]] = ContextVar("cupyconv_argument_names", default=_NO_NAMES)


def arg(name: str, default: str | None = None) -> str:
    """How the caller spells cupyconv's argument (or shape role) ``name``: the entry of the map
    of the innermost :func:`spoken_as`; without one, ``default`` where given (the phrase
    cupyconv's own message uses, such as "the input"), else ``name`` itself."""
    spelled = _NAMES.get().get(name)
    if spelled is not None:
        return spelled
    return name if default is None else default


@contextmanager
def spoken_as(names: Mapping[str, str]):
    """Within the block, error messages name cupyconv's arguments by ``names`` ({cupyconv's
    name: the caller's}); names the map leaves out keep cupyconv's spelling."""
    token = _NAMES.set(MappingProxyType(dict(names)))
    try:
        yield
    finally:
        _NAMES.reset(token)
