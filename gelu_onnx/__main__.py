"""``python -m gelu_onnx`` is the ``gelu-onnx`` command."""
import sys

from .cli import main

sys.exit(main())
