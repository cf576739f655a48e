"""The calibration file the scenario names: its parameters and their bounds, reading and
writing it, the measurement tables it is fitted from and what their sources state."""
