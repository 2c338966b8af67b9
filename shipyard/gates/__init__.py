"""Layer 6: gate rules: accuracy recovery, SLO, candidate gates, champion selection, champion/challenger and promotion."""
