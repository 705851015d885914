// (being written) GPU path: cuDNN + cuBLAS.
