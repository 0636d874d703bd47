"""Every Tessera exception class arrives in Python as the class of the same name, with
the C++ message."""

import numpy as np
import pytest

import tessera as ts


def test_the_tree():
    assert issubclass(ts.Error, RuntimeError)
    assert issubclass(ts.ShapeError, ts.ModuleError) and issubclass(ts.ModuleError, ts.Error)
    for cls in (ts.ContainerError, ts.GraphError, ts.BackendError, ts.IoError, ts.NumericsError):
        assert issubclass(cls, ts.Error) and not issubclass(cls, ts.ModuleError)


def test_shape_error():
    with pytest.raises(ts.ShapeError, match=r"Linear: expects input \[\.\.\., 3\], got \[2, 4\]"):
        ts.Linear(3, 2)(np.zeros((2, 4), np.float32))


def test_module_error():
    with pytest.raises(ts.ModuleError) as e:
        ts.Module("NoSuchLayer")
    assert not isinstance(e.value, ts.ShapeError)
    assert "unknown module class 'NoSuchLayer'" in str(e.value)
    with pytest.raises(ts.ModuleError, match="backward"):
        ts.Linear(2, 2).backward(np.zeros((1, 2), np.float32))  # before any forward


def test_container_error():
    seq = ts.Sequential("s").append(ts.Linear(2, 2, name="fc"))
    with pytest.raises(ts.ContainerError, match="nope"):
        seq["nope"]
    with pytest.raises(ts.ContainerError, match="duplicate|already"):
        seq.append(ts.Linear(2, 2, name="fc"))
    with pytest.raises(IndexError, match="no child at index 3"):
        seq[3]


def test_graph_error():
    x = ts.Identity(name="x").node()
    with pytest.raises(ts.GraphError):
        ts.Graph(inputs=x, outputs=[ts.Linear(1, 1, name="d").node(x), ts.Linear(1, 1, name="d").node(x)])


def test_io_error(tmp_path):
    missing = str(tmp_path / "missing.h5")
    with pytest.raises(ts.IoError, match="missing.h5"):
        ts.Linear(2, 2).load(missing)
    with pytest.raises(ts.IoError, match="missing.h5"):
        ts.load(missing)
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"not an hdf5 file")
    with pytest.raises(ts.IoError, match="bad.h5"):
        ts.load(str(bad))
    with pytest.raises(ts.IoError):
        ts.loadMnist(str(tmp_path))


def test_numerics_error():
    net = ts.Sequential("net").append(ts.Linear(2, 2, name="fc")).append(ts.Activation("relu", name="act"))
    x = np.array([[np.nan, 1.0]], np.float32)
    ts.setCheckNumerics(True)
    try:
        with pytest.raises(ts.NumericsError, match="fc"):
            net(x)
    finally:
        ts.setCheckNumerics(False)
    net(x)  # off again: no check


def test_backend_error():
    try:
        ts.randn((2,)).to("cuda:7")
    except ts.BackendError as e:
        assert "cuda:7" in str(e)
    else:
        pytest.fail("a tensor moved to cuda:7 without a BackendError")


STANDARD_LIBRARY_TEXTS = ("_M_range_check", "vector::", "basic_string", "map::at", "std::", "stoi", "stoll",
                          "filesystem error", "bad_alloc", "bad_optional", "bad_variant", "bad_function_call")


def test_no_standard_library_text_reaches_python(tmp_path):
    # The inputs of a fault probe, each a clear Tessera error (or none), never a raw
    # standard-library message.
    bad_npy = tmp_path / "negative.npy"
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (-4, 4), }"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    bad_npy.write_bytes(b"\x93NUMPY\x01\x00" + bytes([len(header) & 0xFF, len(header) >> 8]) + header.encode()
                        + bytes(64))
    (tmp_path / "junk.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    cases = [
        lambda: ts.buildModule({"classname": "Conv2D", "scheme": {"inmaps": 1, "outmaps": 2, "size": 3,
                                                                  "strides": 2}}),
        lambda: ts.loadModelFile(str(tmp_path / "junk.h5")),
        lambda: ts.loadModelFile(str(tmp_path / "missing.h5")),
        lambda: ts.Linear(3, 2).save(str(tmp_path)),  # a directory
        lambda: ts.Linear(3, 2).save("/dev/null"),
        lambda: ts.Linear(3, 2).load(str(tmp_path / "junk.h5")),
        lambda: ts.Sequential("s").append(ts.Linear(2, 2))["x.y.z"],
    ]
    if hasattr(ts, "readNpy"):
        cases.append(lambda: ts.readNpy(str(bad_npy)))
    for case in cases:
        try:
            case()
        except Exception as e:  # noqa: BLE001 - any class: the text is what is checked
            text = f"{type(e).__name__}: {e}"
            assert not any(t in text for t in STANDARD_LIBRARY_TEXTS), text


def test_pytorch_argument_names_get_a_did_you_mean():
    with pytest.raises(TypeError, match=r"Conv2D: no argument 'kernel_size'; did you mean 'size'\?.*"
                                        r"no argument 'padding'; did you mean 'pad'\?"):
        ts.Conv2D(3, 8, kernel_size=3, padding=1)
    with pytest.raises(TypeError, match=r"Linear: no argument 'in_features'; did you mean 'insize'\? "
                                        r"\(it takes insize, outsize, wscale, useBias, initscheme, transposed, name\)"):
        ts.Linear(in_features=4, outsize=2)
    with pytest.raises(TypeError, match=r"no argument 'usebias'; did you mean 'useBias'\?"):
        ts.Linear(4, 2, usebias=False)  # a typo: the closest name
    with pytest.raises(TypeError, match=r"no argument 'zzz' \(it takes"):
        ts.Linear(4, 2, zzz=1)
    assert ts.Conv2D(3, 8, 3, pad=1).dataShapeFrom((1, 3, 8, 8)) == (1, 8, 8, 8)


def test_optimizer_constants_out_of_range():
    with pytest.raises(ts.ModuleError, match=r"SGD: the learning rate must be finite and at least 0, got nan"):
        ts.SGD(learnRate=float("nan"))
    with pytest.raises(ts.ModuleError, match=r"Adam: beta1 must be in \[0, 1\), got 2"):
        ts.Adam(beta1=2.0)
    opt = ts.Adam()
    with pytest.raises(ts.ModuleError, match="Adam: the learning rate"):
        opt.learnRate = -1.0
    assert opt.learnRate == pytest.approx(1e-3)
