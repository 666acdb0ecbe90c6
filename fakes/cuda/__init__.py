"""kvreg.fakes.cuda: the fake CUDA runtime and driver (docs/cuda-runtime.md).

One engine (``cuda_runtime``, ``cuda_driver``: registrations in ``registry``, copies in
``copies``, device facts in ``profile`` and ``device_attributes``, error codes in ``errors``)
behind the faces code under test calls: ``torch_face`` (``torch.cuda.cudart()``),
``cuda_python_face`` and ``driver_face`` (``cuda.bindings``), ``ctypes_face`` (libcudart through
ctypes). ``fake_cuda.FakeCuda`` builds one fake and patches the faces in.
"""
