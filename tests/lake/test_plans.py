"""Reading the RAPIDS planner's explain report (jobs.lake.plans.fallbacks): report text written by hand in the
plugin's format."""
from __future__ import annotations

from jobs.lake.plans import Fallback, fallbacks

REPORT = """\
*Exec <ProjectExec> will run on GPU
  !Exec <BatchScanExec> cannot run on GPU because not all scans can be replaced
    @Expression <AttributeReference> customer_id#3 could run on GPU
  !NOT_FOUND <GpuProjectExec> cannot run on GPU because GPU does not currently support the operator class com.nvidia.spark.rapids.GpuProjectExec
    !NOT_FOUND <GpuAnd> cannot run on GPU because GPU does not currently support the operator class org.apache.spark.sql.rapids.GpuAnd
  !NOT_FOUND <TargetSize> cannot run on GPU because GPU does not currently support the operator class com.nvidia.spark.rapids.TargetSize
  !NOT_FOUND <RDDScanExec> cannot run on GPU because GPU does not currently support the operator class org.apache.spark.sql.execution.RDDScanExec
"""


def test_fallbacks_are_the_cpu_operators_not_the_plugins_own_already_converted_ones():
    assert fallbacks(REPORT) == [
        Fallback("Exec", "BatchScanExec", "not all scans can be replaced"),
        Fallback("NOT_FOUND", "RDDScanExec",
                 "GPU does not currently support the operator class org.apache.spark.sql.execution.RDDScanExec"),
    ]
