using System.Buffers.Binary;
using PersistentServices.Log.Records;

namespace PersistentServices.Nondeterminism;

/// <summary>The default <see cref="IPersistentRandom"/>: values from <see cref="Random.Shared"/>.</summary>
internal sealed class PersistentRandom : IPersistentRandom
{
    public int Next() => (int)LoggedValues.Int64(NondeterministicKind.RandomInt64, () => Random.Shared.Next());

    public int Next(int maxExclusive) => Next(0, maxExclusive);

    public int Next(int minInclusive, int maxExclusive)
        => (int)LoggedValues.Int64(NondeterministicKind.RandomInt64, () => Random.Shared.Next(minInclusive, maxExclusive));

    public long NextInt64(long minInclusive, long maxExclusive)
        => LoggedValues.Int64(NondeterministicKind.RandomInt64, () => Random.Shared.NextInt64(minInclusive, maxExclusive));

    public double NextDouble()
        => BitConverter.Int64BitsToDouble(LoggedValues.Int64(NondeterministicKind.RandomDouble, () => BitConverter.DoubleToInt64Bits(Random.Shared.NextDouble())));

    public void NextBytes(Span<byte> buffer)
    {
        var length = buffer.Length;
        LoggedValues.Bytes(NondeterministicKind.RandomBytes, () =>
        {
            var bytes = new byte[length];
            Random.Shared.NextBytes(bytes);
            return bytes;
        }).AsSpan(0, length).CopyTo(buffer);
    }
}

/// <summary>The default <see cref="IPersistentIdGenerator"/>: version 7 (time-ordered) GUIDs.</summary>
internal sealed class PersistentIdGenerator : IPersistentIdGenerator
{
    public Guid NewGuid()
    {
        var bytes = LoggedValues.Bytes(NondeterministicKind.NewGuid, () => Guid.CreateVersion7().ToByteArray());
        return new Guid(bytes);
    }
}
