"""Adapters that plug Interlock into agent frameworks: the framework's native
interrupt becomes an Interlock suspension, and the decision comes back as the
framework's native resume. Each needs its framework installed
(``pip install 'interlock-hitl[strands]'`` or ``[claude]``)."""
