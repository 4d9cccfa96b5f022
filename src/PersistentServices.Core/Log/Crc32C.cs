using System.Buffers.Binary;
using System.Numerics;

namespace PersistentServices.Log;

/// <summary>
/// CRC-32C (Castagnoli), hardware-accelerated through <see cref="BitOperations.Crc32C(uint, ulong)"/>.
/// System.IO.Hashing is not in the registry copy (docs/dependencies.md).
/// </summary>
internal static class Crc32C
{
    private const uint Seed = 0xFFFF_FFFF;

    public static uint Compute(ReadOnlySpan<byte> data) => ~Append(Seed, data);

    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    private static uint Append(uint crc, ReadOnlySpan<byte> data)
    {
        while (data.Length >= sizeof(ulong))
        {
            crc = BitOperations.Crc32C(crc, BinaryPrimitives.ReadUInt64LittleEndian(data));
            data = data[sizeof(ulong)..];
        }

        if (data.Length >= sizeof(uint))
        {
            crc = BitOperations.Crc32C(crc, BinaryPrimitives.ReadUInt32LittleEndian(data));
            data = data[sizeof(uint)..];
        }

        foreach (var b in data)
        {
            crc = BitOperations.Crc32C(crc, b);
        }

        return crc;
    }
}
