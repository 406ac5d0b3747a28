from cudaprobe.cli import main

main(prog_name="cudaprobe")
