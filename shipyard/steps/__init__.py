"""Step logic: what each pipeline step does, as plain Python a KFP wrapper in components/ calls with call_step."""
