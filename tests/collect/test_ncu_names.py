"""same_kernel: an ncu result joined to the trace's kernel, across demanglers, cut names and mangled names."""

from __future__ import annotations

import csv

from conftest import fixture_path
from test_ncu_command import kernel_table

from advisor.collect.ncu import select_kernels
from advisor.load.ncu_tables import function_name
from advisor.tools.ncu_names import same_kernel

CUPTI = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
         "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
         "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
         "std::array<char*, 3ul>)")


def _nsys_names() -> list[str]:
    with fixture_path("nsys", "pytorch_ocr_cuda_gpu_kern_sum.csv").open() as fh:
        return [row["Name"] for row in csv.DictReader(fh)]


def test_the_other_demanglers_name_is_the_same_kernel_and_its_siblings_are_not() -> None:
    names = _nsys_names()  # written the way ncu writes them: (int)4, (unsigned long)3, >>
    assert [n for n in names if same_kernel(CUPTI, n, function_name(n))] == \
        [n for n in names if "binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)3>" in n]


def test_a_bare_function_name_or_a_mangled_name_matches_by_its_identifier() -> None:
    assert same_kernel(CUPTI, "", "vectorized_elementwise_kernel")
    assert same_kernel(CUPTI, "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BinaryFunctorIfffNS0_15"
                              "binary_internal10MulFunctorIfEEEESt5arrayIPcLm3EEEEviT0_T1_")
    assert not same_kernel(CUPTI, "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_EEEviT1_")
    assert not same_kernel(CUPTI, "", "unrolled_elementwise_kernel")


def test_a_name_ncu_cut_short_matches_on_what_it_kept() -> None:
    assert same_kernel(CUPTI, "void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<float, f...")
    assert not same_kernel(CUPTI, "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_a...")


def test_plain_c_names_match_whole() -> None:
    assert same_kernel("volta_sgemm_64x64_nt", "volta_sgemm_64x64_nt", "volta_sgemm_64x64_nt")
    assert not same_kernel("volta_sgemm_64x64_nt", "volta_sgemm_128x64_nt", "volta_sgemm_128x64_nt")
    assert not same_kernel("", "volta_sgemm_64x64_nt") and not same_kernel("volta_sgemm_64x64_nt", "", "")


def test_every_kernel_of_the_v100_trace_is_only_itself() -> None:
    names = [r["name"] for r in kernel_table("v100_resnet_single_rank.pt.trace.json.gz")]
    for name in names:
        assert [n for n in names if same_kernel(n, name, "")] == [name]


def test_kernels_a_diagnosis_asks_for_come_first_then_the_roofline_candidates_then_time() -> None:
    rows = kernel_table("v100_resnet_single_rank.pt.trace.json.gz")
    asked = [(rows[5]["name"], "GPU006"), (rows[5]["name"], "GPU009"), (rows[7]["name"], "GPU009")]
    candidates = [{"name": rows[9]["name"], "lost_ms": 2.0}, {"name": rows[1]["name"], "lost_ms": 1.0}]
    targets = select_kernels(rows, limit=4, asked=asked, candidates=candidates)
    assert [t.name for t in targets] == [rows[5]["name"], rows[7]["name"], rows[9]["name"], rows[1]["name"]]
    assert [t.asked_by for t in targets] == [["GPU006", "GPU009"], ["GPU009"], [], []]
    assert targets[2].calls_per_step == rows[9]["calls_per_step"]  # the candidate's kernels.top figures
    # nothing asked: the time order, as before
    assert [t.name for t in select_kernels(rows, limit=3)] == [r["name"] for r in rows[:3]]
