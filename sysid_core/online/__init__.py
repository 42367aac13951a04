"""The identified model at work while the arm runs: its torque prediction, the external torque and
contact, the terminal body's payload tracked live, and gravity compensation."""
