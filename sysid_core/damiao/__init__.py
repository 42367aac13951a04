"""Damiao joint motors in MIT mode: the CAN protocol codec, an arm's motor layout, and a virtual
arm of emulated motors over MuJoCo. Builds on ``simulation``."""
