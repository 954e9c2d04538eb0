// Classifies a synthetic image with the compiled model from C++: the package's header is plain C
// with extern "C" guards, so it links like any C library.
#include <cmath>
#include <cstdio>
#include <vector>

#include "tiny_cnn.h"

int main() {
    // The arena may come from anywhere: here a vector, over-allocated and aligned by hand.
    const aot_model_info *info = tiny_cnn_info();
    std::vector<unsigned char> memory(aot_arena_padded_size(info));
    void *arena = aot_arena_align(info, memory.data());

    std::vector<float> image(TINY_CNN_INPUT0_SIZE), probabilities(TINY_CNN_OUTPUT0_SIZE);
    for (size_t i = 0; i < image.size(); ++i) image[i] = std::sin(0.05f * static_cast<float>(i));

    tiny_cnn_inputs in = {image.data()};
    tiny_cnn_outputs out = {probabilities.data()};
    aot_status status = tiny_cnn_run(&in, &out, arena);
    if (status != AOT_OK) {
        std::fprintf(stderr, "tiny_cnn_run: %s\n", aot_status_string(status));
        return 1;
    }
    size_t best = 0;
    for (size_t k = 1; k < probabilities.size(); ++k) if (probabilities[k] > probabilities[best]) best = k;
    std::printf("%s: class %zu, p=%.4f, arena %zu bytes\n", info->name, best, probabilities[best], info->arena_size);
    return 0;
}
