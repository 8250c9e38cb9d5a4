from engine.strategy_build import checked_functions as _checked_functions
_checked = _checked_functions(_user)

