namespace PersistentServices;

/// <summary>
/// Random numbers for persistent endpoints: logged inside a persistent request and returned from the log on replay.
/// Inject it instead of <see cref="Random"/> (PS0201).
/// </summary>
[System.Diagnostics.CodeAnalysis.SuppressMessage("Naming", "CA1716:Identifiers should not match keywords", Justification = "The same names as System.Random, which this replaces in persistent code.")]
public interface IPersistentRandom
{
    /// <summary>A non-negative random integer.</summary>
    int Next();

    /// <summary>A random integer in [0, <paramref name="maxExclusive"/>).</summary>
    int Next(int maxExclusive);

    /// <summary>A random integer in [<paramref name="minInclusive"/>, <paramref name="maxExclusive"/>).</summary>
    int Next(int minInclusive, int maxExclusive);

    /// <summary>A random 64-bit integer in [<paramref name="minInclusive"/>, <paramref name="maxExclusive"/>).</summary>
    long NextInt64(long minInclusive, long maxExclusive);

    /// <summary>A random number in [0, 1).</summary>
    double NextDouble();

    /// <summary>Fills <paramref name="buffer"/> with random bytes.</summary>
    void NextBytes(Span<byte> buffer);
}
