# v++ -l --config v++.cfg -t hw --platform xilinx_u250_gen3x16_xdma_4_1_202210_1 engine_tree.xo -o engine_tree.xclbin
kernel_frequency=${clock_mhz}
[connectivity]
nk=engine_tree_mm:1:engine_tree_mm_1
sp=engine_tree_mm_1.rows:DDR[0]
sp=engine_tree_mm_1.scores:DDR[0]
