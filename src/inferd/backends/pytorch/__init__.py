"""The PyTorch backend: ``backend.py`` (TorchScript ``model.pt``, ``torch.export`` ``model.pt2``),
``naming.py`` (Triton's input/output naming rules), ``settings.py`` (config ``parameters``).

Nothing is imported here, and ``backend`` imports torch only when a PyTorch model loads.
"""
