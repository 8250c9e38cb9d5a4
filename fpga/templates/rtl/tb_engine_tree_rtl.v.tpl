// generated testbench: feeds one row per clock, writes every score, measures the latency
`timescale 1ns/1ps
module tb;
  parameter MAXN = 1 << 20;
  reg clk = 0;
  always #2.5 clk = ~clk;  // 200 MHz
  reg in_valid = 0;
  reg [${nf_msb}:0] missing;
  reg [${nf_msb}:0] mm [0:MAXN-1];
${decl}
  wire out_valid;
  wire signed [${acc_msb}:0] score;
  engine_tree_rtl dut (.clk(clk), .in_valid(in_valid), .missing(missing), ${conns}, .out_valid(out_valid), .score(score));
  integer n, i, fo, cyc, first_in, first_out, outs;
  reg [1023:0] dir;
  initial begin
    if (!$value$plusargs("dir=%s", dir)) dir = ".";
    if (!$value$plusargs("n=%d", n)) n = 0;
${loads}
    $readmemh({dir, "/missing.hex"}, mm);
    fo = $fopen({dir, "/rtl_out.txt"}, "w");
    cyc = 0; first_in = -1; first_out = -1; outs = 0;
    for (i = 0; i < n; i = i + 1) begin
      @(negedge clk);
${drive}
      missing = mm[i];
      in_valid = 1;
      if (first_in < 0) first_in = cyc;
    end
    @(negedge clk);
    in_valid = 0;
    repeat (64) @(negedge clk);
    $fdisplay(fo, "cycles %0d", first_out - first_in);
    $fclose(fo);
    $finish;
  end
  always @(posedge clk) begin
    cyc = cyc + 1;
  end
  always @(negedge clk) begin
    if (out_valid) begin
      if (first_out < 0) first_out = cyc;
      $fdisplay(fo, "%0d", score);
      outs = outs + 1;
    end
  end
endmodule
