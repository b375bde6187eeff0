"""Framework-neutral utilities below the core and every runtime (standard library and NumPy
only): exits and watchdogs (`faults`), goodput, progress and /metrics (`metrics`), the final
outputs, the start-up line, the step count, the leader wait, the audit's writer, the
in-memory datasets (`data`), user code and the built-in models (`models`), dataset files."""
