#include "probe.h"

namespace ns {

class Klass {
  public:
    int method(int x);
};

NOINLINE int Klass::method(int x) {
    probe("method", __LINE__, 0, 0);
    return x + sink;
}

} // namespace ns

int main() {
    ns::Klass k;
    k.method(1);
    print_maps();
    return 0;
}
