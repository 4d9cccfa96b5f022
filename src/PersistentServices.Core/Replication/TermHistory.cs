using System.Buffers.Binary;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>One entry of a <see cref="TermHistory"/>: no byte of <paramref name="Term"/> (or of an older term learned with it) lies in the log below <paramref name="Address"/>.</summary>
internal readonly record struct TermStart(long Term, long Address);

/// <summary>
/// Where each term's part of a log directory's log begins (<c>term-starts</c>, beside the log's files; docs/replication.md,
/// "Rejoining by cutting back"): what a primary needs to cut a rejoining replica's tail of an older term back to where the
/// next term began here, instead of resetting it. An entry (T, A) is written before anything of term T is: by a primary
/// at the start of its term (A: its log's durable end then, before it appends anything), by a replica when it takes the
/// first bytes of a newer term's primary (A: where that shipment starts). So every byte of the log, of whatever term t,
/// lies at or after the address of an entry of a term at least t: <see cref="SuccessorStart"/> is never above the first
/// byte of a newer term (it may be below: a cut there only reships more). Terms ascending, addresses non-decreasing.
/// <para>
/// Format: "PSH1", the number of entries (int32), each entry's term and address (int64), a CRC-32C of everything before
/// (all little-endian); written atomically (temp file, fsync, rename, fsync the directory, <see cref="DurableFile.WriteAtomically"/>).
/// A damaged file is a <see cref="LogCorruptionException"/> (fail-stop).
/// </para>
/// </summary>
internal sealed class TermHistory
{
    public const string FileName = "term-starts";
    private const uint Magic = 0x31485350; // "PSH1"
    private const int HeaderSize = 8;
    private const int EntrySize = 16;

    private readonly TermStart[] _starts;

    private TermHistory(TermStart[] starts) => _starts = starts;

    /// <summary>No entries.</summary>
    public static TermHistory Empty { get; } = new([]);

    /// <summary>The entries, terms ascending.</summary>
    public IReadOnlyList<TermStart> Starts => _starts;

    /// <summary>The newest term with an entry (0: none).</summary>
    public long LastTerm => _starts.Length == 0 ? 0 : _starts[^1].Term;

    public static string PathIn(string directory) => Path.Combine(directory, FileName);

    /// <summary>
    /// Where the first term newer than <paramref name="term"/> begins in this log (at or below the first byte of any newer
    /// term), or null when no newer term has an entry.
    /// </summary>
    public long? SuccessorStart(long term)
    {
        foreach (var start in _starts)
        {
            if (start.Term > term)
            {
                return start.Address; // addresses are non-decreasing with the term: the first newer is the lowest
            }
        }

        return null;
    }

    /// <summary>This history with <paramref name="term"/> beginning at <paramref name="address"/>; itself when it already has an entry of that term or a newer one.</summary>
    public TermHistory With(long term, long address)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(address);
        if (term <= LastTerm)
        {
            return this;
        }

        // An older entry above this address is lowered to it, so that the addresses stay non-decreasing: a lower bound of
        // where a term's bytes begin stays one.
        var starts = _starts.Select(s => s.Address > address ? s with { Address = address } : s).Append(new TermStart(term, address)).ToArray();
        return new TermHistory(starts);
    }

    /// <summary>This history for the log cut back to (or ending at) <paramref name="until"/>: entries of terms whose part lies wholly past it go.</summary>
    public TermHistory Until(long until)
    {
        var kept = _starts.Where(s => s.Address <= until).ToArray();
        return kept.Length == _starts.Length ? this : new TermHistory(kept);
    }

    /// <summary>Exactly these entries (a reset's: the primary's term from its begin).</summary>
    public static TermHistory Of(params TermStart[] starts)
    {
        for (var i = 1; i < starts.Length; i++)
        {
            if (starts[i].Term <= starts[i - 1].Term || starts[i].Address < starts[i - 1].Address)
            {
                throw new ArgumentException("Term starts are in ascending terms at non-decreasing addresses.", nameof(starts));
            }
        }

        return new TermHistory([.. starts]);
    }

    /// <summary>What <paramref name="directory"/> records; null when it has no file.</summary>
    /// <exception cref="LogCorruptionException">The file exists but is damaged.</exception>
    /// <exception cref="LogFormatException">The file was written by a newer version of this library.</exception>
    public static TermHistory? Read(string directory)
    {
        var path = PathIn(directory);
        if (!File.Exists(path))
        {
            return null;
        }

        var content = File.ReadAllBytes(path);
        if (content.Length >= 4 && content.AsSpan(0, 3).SequenceEqual("PSH"u8) && content[3] is > (byte)'1' and <= (byte)'9')
        {
            throw new LogFormatException(
                $"The term history '{path}' has format {(char)content[3]}, newer than this build reads (1): it was written by a newer version of PersistentServices. " +
                "Run that version, or a newer one, on this directory.");
        }

        var count = content.Length >= HeaderSize ? BinaryPrimitives.ReadInt32LittleEndian(content.AsSpan(4)) : -1;
        var valid = content.Length >= HeaderSize + 4 && BinaryPrimitives.ReadUInt32LittleEndian(content) == Magic && count >= 0 &&
                    (long)HeaderSize + ((long)count * EntrySize) + 4 == content.Length &&
                    BinaryPrimitives.ReadUInt32LittleEndian(content.AsSpan(content.Length - 4)) == Crc32C.Compute(content.AsSpan(0, content.Length - 4));
        var starts = new TermStart[valid ? count : 0];
        for (var i = 0; valid && i < count; i++)
        {
            var at = HeaderSize + (i * EntrySize);
            starts[i] = new TermStart(BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(at)), BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(at + 8)));
            valid = starts[i].Term >= 0 && starts[i].Address >= 0 && (i == 0 || (starts[i].Term > starts[i - 1].Term && starts[i].Address >= starts[i - 1].Address));
        }

        if (!valid)
        {
            throw new LogCorruptionException(
                $"The term history '{path}' is damaged ({content.Length} bytes). It says where each term's part of this log begins, which a primary needs to cut a " +
                "rejoining replica back without losing what it holds; the directory cannot be trusted without it. Restore the directory from a replica or a backup (docs/replication.md).",
                0);
        }

        return new TermHistory(starts);
    }

    /// <summary>Writes the history durably (temp file, fsync, rename, fsync the directory).</summary>
    public void Write(string directory, UnixFileMode mode = DurableFile.OwnerOnly)
    {
        var content = new byte[HeaderSize + (_starts.Length * EntrySize) + 4];
        BinaryPrimitives.WriteUInt32LittleEndian(content, Magic);
        BinaryPrimitives.WriteInt32LittleEndian(content.AsSpan(4), _starts.Length);
        for (var i = 0; i < _starts.Length; i++)
        {
            var at = HeaderSize + (i * EntrySize);
            BinaryPrimitives.WriteInt64LittleEndian(content.AsSpan(at), _starts[i].Term);
            BinaryPrimitives.WriteInt64LittleEndian(content.AsSpan(at + 8), _starts[i].Address);
        }

        BinaryPrimitives.WriteUInt32LittleEndian(content.AsSpan(content.Length - 4), Crc32C.Compute(content.AsSpan(0, content.Length - 4)));
        DurableFile.WriteAtomically(PathIn(directory), content, mode);
    }

    public override string ToString() => string.Join(", ", _starts.Select(s => $"term {s.Term} from {s.Address}"));
}
