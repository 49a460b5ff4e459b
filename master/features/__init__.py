"""The master's optional features (LoTES, preemption, the federation LM): each sees the service only through master/ports.py's MasterPort and is plugged in by master/app/assemble.py."""
