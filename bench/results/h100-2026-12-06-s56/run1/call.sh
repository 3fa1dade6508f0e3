bash .after-s55/first56.sh   # run with carry [".after-s55"], kind nvidia-h200 (an H100 came)
