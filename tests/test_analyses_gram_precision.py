"""analyses/benchmarks/gram_precision.py: TF32 rounding, the float32 variant is the spectrum measure's own Gram, the table."""

import numpy as np
import pandas as pd
import torch

from analyses.benchmarks.gram_precision import COLUMNS, main, round_tf32, variant_gram
from interp.measures.spectrum import gram


def test_tf32_rounding_keeps_ten_mantissa_bits_to_nearest_even():
    one = 1.0
    cases = {one + 2**-11: one,                      # halfway: to the even neighbour 1.0
             one + 3 * 2**-11: one + 2**-9,           # halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even)
             one + 2**-11 + 2**-20: one + 2**-10,     # just above halfway: up
             -(2.0 + 2**-10 + 2**-12): -(2.0 + 2**-9)}  # at 2, one TF32 ulp is 2^-9: 2^-10 + 2^-12 is past halfway
    x = torch.tensor(list(cases), dtype=torch.float32)
    assert round_tf32(x).tolist() == list(cases.values())
    r = round_tf32(torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 100)
    assert (r.view(torch.int32) & 0x1FFF).eq(0).all()


def test_float32_variant_is_the_measure_gram_and_the_others_are_near_float64():
    x = torch.randn(300, 3, 16, generator=torch.Generator().manual_seed(1))
    assert torch.equal(variant_gram(x, "float32"), gram(x))
    ref = variant_gram(x, "float64")
    np.testing.assert_allclose(ref, torch.einsum("phd,phe->hde", x.double(), x.double()), rtol=1e-12)
    for v, tol in (("tf32", 2**-10), ("bf16", 2**-7)):  # per entry at most a few input roundings, relative to ||x_d|| ||x_e||
        scale = ref.diagonal(dim1=-2, dim2=-1).sqrt()
        err = (variant_gram(x, v) - ref).abs() / (scale[..., :, None] * scale[..., None, :])
        assert 0 < err.max() < tol, v


def test_quick_run_writes_one_row_per_variant_and_column(tmp_path):
    main(["--quick", "--out", str(tmp_path)])
    df = pd.read_csv(tmp_path / "gram_precision.csv")
    assert len(df) == 3 * len(COLUMNS) and set(df["variant"]) == {"float32", "tf32", "bf16"}
    err = df[df["measure"] != "R95"].pivot(index="measure", columns="variant", values="max_rel_err")
    assert (err["float32"] < 1e-5).all()  # float32 products on 64 tokens: float32 rounding, far below TF32's 2^-11
    assert (err["bf16"] > err["float32"]).all() and (err["tf32"] > err["float32"]).all()
