"""What the arm is asked to do: trajectories (save, load, resample), multisine excitation and
optimized Fourier excitation. Builds on ``identification`` (the optimizer scores base regressors)."""
