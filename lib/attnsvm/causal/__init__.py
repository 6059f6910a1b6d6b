"""Every token a query: causal (next-token) attention, the synthetic language, the causal and soft-margin
Att-SVMs and the token-preference graph."""

from ._causal import *  # noqa: F401,F403
from ._causal import __all__  # noqa: F401
