using System.Buffers.Binary;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>What a log directory's term file says (docs/replication.md).</summary>
/// <param name="Term">The newest replication term the directory has seen: shipments of an older one are refused.</param>
/// <param name="Primary">Whether the directory is the primary of <paramref name="Term"/> (a node starts in the role its directory records).</param>
/// <param name="ContentTerm">The term of the primary that wrote the directory's last log bytes: whose history its log continues.</param>
/// <param name="VotedFor">
/// The candidate this directory granted <paramref name="Term"/> to (Raft's <c>votedFor</c>): a promotion's claim of
/// <paramref name="Term"/> from any other candidate is refused. <see cref="Guid.Empty"/>: granted to no candidate (the
/// term was taken from its primary's shipment, from a fence, or this directory is that primary), so every claim of it is
/// refused.
/// </param>
internal readonly record struct TermRecord(long Term, bool Primary, long ContentTerm, Guid VotedFor = default);

/// <summary>
/// The replication state of a log directory (<c>term</c>, beside the log's files; <see cref="TermRecord"/>): written before
/// anything of a newer term is accepted, so a promotion, a vote or a fence outlives the process. 44 bytes: "PST2", the
/// term, the content term (little-endian), the role (1: primary, 0: replica) and three zero bytes, the candidate voted for
/// (16 bytes, a <see cref="Guid"/> in its standard byte order; all zero: none), a CRC-32C of the 40 before; written
/// atomically (temp file, fsync, rename, fsync the directory). A file of the first format ("PST1", 28 bytes: the same
/// without the candidate) is read as recording no vote; the next write replaces it with the current format.
/// </summary>
internal static class TermFile
{
    public const string FileName = "term";
    private const uint Magic = 0x32545350; // "PST2"
    private const int Size = 44;
    private const uint MagicV1 = 0x31545350; // "PST1": no vote recorded
    private const int SizeV1 = 28;

    public static string PathIn(string directory) => Path.Combine(directory, FileName);

    /// <summary>What <paramref name="directory"/> records; null when it records nothing (a directory that was never replicated).</summary>
    /// <exception cref="LogCorruptionException">The file exists but is damaged.</exception>
    /// <exception cref="LogFormatException">The file was written by a newer version of this library (a format this one does not read).</exception>
    public static TermRecord? Read(string directory)
    {
        var path = PathIn(directory);
        if (!File.Exists(path))
        {
            return null;
        }

        var content = File.ReadAllBytes(path);
        var magic = content.Length >= 4 ? BinaryPrimitives.ReadUInt32LittleEndian(content) : 0;
        var size = magic switch
        {
            Magic => Size,
            MagicV1 => SizeV1,
            _ => -1,
        };
        if (size < 0 && content.Length >= 4 && content.AsSpan(0, 3).SequenceEqual("PST"u8) && content[3] is > (byte)'2' and <= (byte)'9')
        {
            throw new LogFormatException(
                $"The replication term file '{path}' has format {(char)content[3]}, newer than this build reads (2): it was written by a newer version of " +
                "PersistentServices. Run that version, or a newer one, on this directory.");
        }

        if (size < 0 || content.Length != size ||
            BinaryPrimitives.ReadUInt32LittleEndian(content.AsSpan(size - 4)) != Crc32C.Compute(content.AsSpan(0, size - 4)))
        {
            throw new LogCorruptionException(
                $"The replication term file '{path}' is damaged ({content.Length} bytes). It fences older primaries and records this node's vote; the directory cannot be trusted without it. Restore the directory from a replica or a backup (docs/replication.md).",
                0);
        }

        var votedFor = size == Size ? new Guid(content.AsSpan(24, 16)) : Guid.Empty;
        return new TermRecord(BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(4)), content[20] == 1, BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(12)), votedFor);
    }

    public static void Write(string directory, TermRecord record, UnixFileMode mode = DurableFile.OwnerOnly)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(record.Term);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(record.ContentTerm, record.Term);
        Span<byte> content = stackalloc byte[Size];
        content.Clear();
        BinaryPrimitives.WriteUInt32LittleEndian(content, Magic);
        BinaryPrimitives.WriteInt64LittleEndian(content[4..], record.Term);
        BinaryPrimitives.WriteInt64LittleEndian(content[12..], record.ContentTerm);
        content[20] = record.Primary ? (byte)1 : (byte)0;
        if (!record.VotedFor.TryWriteBytes(content.Slice(24, 16)))
        {
            throw new InvalidOperationException("A Guid is 16 bytes.");
        }

        BinaryPrimitives.WriteUInt32LittleEndian(content[(Size - 4)..], Crc32C.Compute(content[..(Size - 4)]));
        DurableFile.WriteAtomically(PathIn(directory), content, mode);
    }
}
