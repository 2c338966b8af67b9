"""Layer 3: compression recipes and calibration data (data: recipes/, calibration/)."""
