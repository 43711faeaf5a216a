// The JVM: a method that allocates a 48 MiB long[] 40 times. memcost trace must name
// `Arrays.allocateBlocks`, not HotSpot's os:: functions.
public class Arrays {
    static long allocateBlocks(int count, int longs) {
        long sum = 0;
        for (int i = 0; i < count; i++) {
            long[] block = new long[longs];
            for (int j = 0; j < longs; j += 512) block[j] = i + j;
            sum += block[longs / 2];
        }
        return sum;
    }

    public static void main(String[] args) {
        System.out.println(allocateBlocks(40, 48 * 1024 * 1024 / 8));
    }
}
