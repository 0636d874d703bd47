"""Tensors to and from NumPy: dtypes, shapes, shared memory and copies."""

import gc

import numpy as np
import pytest

import tessera as ts


def aligned(shape, dtype="float32"):
    """A NumPy array over 64-byte aligned memory: tessera.empty's."""
    return ts.empty(shape, dtype).numpy()


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_aligned_contiguous_arrays_are_shared_both_ways(dtype):
    a = aligned((3, 4), dtype)
    a[...] = np.arange(12).reshape(3, 4)
    t = ts.tensor(a)
    assert t.shape == (3, 4) and t.dtype == dtype and t.device == "cpu"
    b = t.numpy()
    assert b.dtype == np.dtype(dtype) and b.shape == (3, 4)
    assert np.shares_memory(a, b)
    b[1, 2] = 42  # one memory: writes through the tensor's view reach the array
    assert a[1, 2] == 42


def test_other_arrays_are_copied_once_with_the_right_values():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = base[:, ::2]  # not contiguous
    t = ts.tensor(strided)
    assert t.shape == (4, 3)
    np.testing.assert_array_equal(t.numpy(), strided)
    assert not np.shares_memory(t.numpy(), base)

    readonly = aligned((5,))
    readonly[:] = 1
    readonly.flags.writeable = False
    t = ts.tensor(readonly)
    assert not np.shares_memory(t.numpy(), readonly)

    forced = aligned((2, 2))
    assert not np.shares_memory(ts.tensor(forced, copy=True).numpy(), forced)


def test_unaligned_float32_is_copied():
    raw = aligned((65,))
    raw[:] = np.arange(65)
    offset = raw[1:]  # 4 bytes past a 64-byte boundary
    t = ts.tensor(offset)
    np.testing.assert_array_equal(t.numpy(), np.arange(1, 65, dtype=np.float32))
    assert not np.shares_memory(t.numpy(), raw)


def test_dtype_conversions():
    t = ts.tensor(np.array([[1.5, 2.25]], dtype=np.float64))
    assert t.dtype == "float32" and t.shape == (1, 2)
    np.testing.assert_array_equal(t.numpy(), [[1.5, 2.25]])
    t = ts.tensor(np.array([3, -7], dtype=np.int64))
    assert t.dtype == "int32"
    np.testing.assert_array_equal(t.numpy(), [3, -7])
    assert ts.tensor([1.0, 2.0]).dtype == "float32"  # a list, through NumPy
    assert ts.tensor(np.uint8([0, 255])).numpy().tolist() == [0, 255]


def test_bad_arrays_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="outside int32's range"):
        ts.tensor(np.array([2**40], dtype=np.int64))
    with pytest.raises(TypeError, match="complex"):
        ts.tensor(np.zeros(3, dtype=np.complex64))
    with pytest.raises(TypeError, match="tessera"):
        ts.tensor(object())


def test_bfloat16_reads_as_float32_and_blocked_layouts_as_plain():
    x = ts.tensor(np.array([1.0, 1.00390625, 3.14159], dtype=np.float32))
    b = x.astype("bfloat16")
    assert b.dtype == "bfloat16"
    out = b.numpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 1.0, 3.140625])  # rounded to 8 significant bits

    conv = ts.Conv2D(16, 16, 3, pad=1)
    xin = ts.randn((2, 16, 5, 5))
    y = conv(xin)
    assert y.layout != "plain"  # the CPU convolution writes channel-blocked data
    a = y.numpy()
    assert a.shape == (2, 16, 5, 5)
    np.testing.assert_allclose(a, np.asarray(y.plain()), rtol=0, atol=0)
    W = conv.namedParams()["W"].data.numpy()
    bias = conv.namedParams()["b"].data.numpy()
    xp = np.pad(xin.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.einsum("nchwij,ocij->nohw",
                    np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3)), W) + bias.reshape(1, -1, 1, 1)
    np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-4)


def test_lifetimes():
    a = ts.randn((1000,)).numpy()  # the tensor is gone; the array holds its memory
    gc.collect()
    assert np.isfinite(a).all() and a.std() > 0.5

    src = aligned((1000,))
    src[:] = 7
    t = ts.tensor(src)
    del src  # the tensor holds the array
    gc.collect()
    assert (t.numpy() == 7).all()


def test_gpu_tensors_say_so():
    try:
        t = ts.randn((2, 2)).to("cuda")
    except ts.BackendError as e:
        assert "CUDA" in str(e)
        pytest.skip("no CUDA device: " + str(e))
    with pytest.raises(TypeError, match=r"\.to\('cpu'\)"):
        t.numpy()
    np.testing.assert_array_equal(t.numpy(copy=True), t.to("cpu").numpy())


def test_tensor_properties_and_factories():
    t = ts.zeros((2, 3), "int32")
    assert (t.shape, t.dtype, t.ndim, t.size, len(t)) == ((2, 3), "int32", 2, 6, 2)
    assert "shape=(2, 3)" in repr(t)
    ts.manualSeed(5)
    a = ts.randn((4,)).numpy().copy()
    ts.manualSeed(5)
    np.testing.assert_array_equal(ts.randn((4,)).numpy(), a)
    assert np.asarray(ts.full((2,), 3.5)).tolist() == [3.5, 3.5]
    with pytest.raises(ValueError, match="device"):
        t.to("tpu")
    with pytest.raises(ValueError, match="dtype"):
        t.astype("float64")


def test_indexing_reads_copies_with_numpys_rules():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = ts.tensor(a, copy=True)
    for key in [0, (1, 2), (slice(None), slice(1, 3)), (Ellipsis, -1), (0, [2, 0]), a > 20]:
        part = t[key]
        assert isinstance(part, ts.Tensor) and part.dtype == "float32"
        np.testing.assert_array_equal(part.numpy(), a[key])
    assert t[1, 2, 3] == 23.0 and isinstance(t[1, 2, 3], float)  # one element: a number
    part = t[0]
    part.numpy()[:] = -1  # a copy: the tensor is unchanged
    assert t.numpy()[0].min() == 0
    assert ts.zeros((3,), "int32")[1] == 0 and ts.tensor(np.ones(4, np.float32)).astype("bfloat16")[1:].dtype == "bfloat16"
    with pytest.raises(IndexError):
        t[2]


def test_indexed_assignment_writes_in_place_in_every_layout_and_dtype():
    t = ts.zeros((2, 3))
    t[0] = 1.5
    t[:, 2] = np.array([7, 8], np.float32)
    t[t.numpy() == 0] = -1
    np.testing.assert_array_equal(t.numpy(), [[1.5, 1.5, 7], [-1, -1, 8]])
    t[1, 0] = ts.tensor(np.array(4.0, np.float32))
    assert t[1, 0] == 4.0

    b = ts.zeros((4,)).astype("bfloat16")
    b[1:3] = 3.0
    assert b.dtype == "bfloat16"
    np.testing.assert_array_equal(b.numpy(), [0, 3, 3, 0])

    y = ts.Conv2D(16, 16, 3, pad=1)(ts.randn((1, 16, 3, 3)))
    assert y.layout != "plain"  # channel-blocked: written through a plain copy and back
    want = y.numpy().copy()
    y[0, 5] = 0.25
    want[0, 5] = 0.25
    assert y.layout != "plain"
    np.testing.assert_array_equal(y.numpy(), want)


def test_gpu_settings_are_there_with_or_without_a_gpu():
    n = ts.cudaDeviceCount()
    assert isinstance(n, int) and n >= 0
    for on in (True, False):  # no-ops without CUDA; on a GPU they switch the backends
        assert ts.setCudaDeterministic(on) is None
        assert ts.setCudaAllowTF32(not on) is None
        assert ts.setCuda16BitActivations(on) is None
        assert ts.setCudaChannelsLast(on) is None
        assert ts.setCudaFusedAttention(on) is None
        assert ts.cuda16BitActivations() is on and ts.cudaChannelsLast() is on and ts.cudaFusedAttention() is on
    ts.setCudaAllowTF32(True)
    ts.setCuda16BitActivations(True)  # the defaults
    ts.setCudaChannelsLast(True)
    ts.setCudaFusedAttention(False)
    with pytest.raises(TypeError):
        ts.setCudaDeterministic("yes")


def test_puzzlelib_gpuarray_methods():
    t = ts.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), copy=True)
    got = t.get()
    got[0, 0] = 100  # a copy
    assert t.numpy()[0, 0] == 0
    assert t.nbytes == 24 and ts.zeros((2, 2), dtype="int32").nbytes == 16
    assert t.fill(1.5) is t and (t.numpy() == 1.5).all()
    t.set(np.ones((2, 3), np.float32) * 2)
    assert (t.numpy() == 2).all()
    with pytest.raises(ts.ShapeError, match=r"Tensor.set: the array has shape \(6,\), the tensor \(2, 3\)"):
        t.set(np.ones(6, np.float32))
    assert t.ravel().shape == (6,)


def test_numpy_arithmetic_and_a_repr_with_values():
    a = ts.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), copy=True)
    b = ts.full((2, 3), 2.0)
    for got, want in ((a + b, a.numpy() + 2), (a - 1, a.numpy() - 1), (3 - a, 3 - a.numpy()),
                      (a * b, a.numpy() * 2), (a / b, a.numpy() / 2), (a ** 2, a.numpy() ** 2),
                      (-a, -a.numpy()), (abs(-a), a.numpy()), (a @ a.numpy().T, a.numpy() @ a.numpy().T)):
        assert isinstance(got, ts.Tensor) and got.device == "cpu"
        np.testing.assert_allclose(got.numpy(), want)
    assert ((a > 2) == (a.numpy() > 2)).all()
    assert not a.sharesMemory(a + 0)  # a new tensor
    text = repr(a)
    assert text.startswith("tessera.Tensor([[0., 1., 2.],") and "shape=(2, 3), dtype=float32" in text, text
    assert "..." in repr(ts.zeros((300, 300)))  # summarised
