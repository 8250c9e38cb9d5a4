# Vitis HLS: vitis_hls -f run_hls.tcl
open_project engine_tree_prj
set_top engine_tree_mm
add_files kernel.cpp -cflags "-std=c++14"
add_files -tb tb.cpp -cflags "-std=c++14"
open_solution -reset sol1 -flow_target vitis
set_part xcu250-figd2104-2L-e
create_clock -period ${clock_period_ns} -name default
csim_design -argv "{.}"
csynth_design
export_design -format xo -output engine_tree.xo
exit
