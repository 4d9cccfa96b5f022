using System.Buffers.Binary;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>What a log directory's term file says (docs/replication.md).</summary>
/// <param name="Term">The newest replication term the directory has seen: shipments of an older one are refused.</param>
/// <param name="Primary">Whether the directory is the primary of <paramref name="Term"/> (a node starts in the role its directory records).</param>
/// <param name="ContentTerm">The term of the primary that wrote the directory's last log bytes: whose history its log continues.</param>
internal readonly record struct TermRecord(long Term, bool Primary, long ContentTerm);

/// <summary>
/// The replication state of a log directory (<c>term</c>, beside the log's files; <see cref="TermRecord"/>): written before
/// anything of a newer term is accepted, so a promotion or a fence outlives the process. 24 bytes: "PST1", the term, the
/// content term (little-endian), the role (1: primary, 0: replica) and three zero bytes, a CRC-32C of the 20; written
/// atomically (temp file, fsync, rename, fsync the directory).
/// </summary>
internal static class TermFile
{
    public const string FileName = "term";
    private const uint Magic = 0x31545350; // "PST1"
    private const int Size = 28;

    public static string PathIn(string directory) => Path.Combine(directory, FileName);

    /// <summary>What <paramref name="directory"/> records; null when it records nothing (a directory that was never replicated).</summary>
    /// <exception cref="LogCorruptionException">The file exists but is damaged.</exception>
    public static TermRecord? Read(string directory)
    {
        var path = PathIn(directory);
        if (!File.Exists(path))
        {
            return null;
        }

        var content = File.ReadAllBytes(path);
        if (content.Length != Size || BinaryPrimitives.ReadUInt32LittleEndian(content) != Magic ||
            BinaryPrimitives.ReadUInt32LittleEndian(content.AsSpan(Size - 4)) != Crc32C.Compute(content.AsSpan(0, Size - 4)))
        {
            throw new LogCorruptionException(
                $"The replication term file '{path}' is damaged ({content.Length} bytes). It fences older primaries; the directory cannot be trusted without it. Restore the directory from a replica or a backup (docs/replication.md).",
                0);
        }

        return new TermRecord(BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(4)), content[20] == 1, BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(12)));
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
        BinaryPrimitives.WriteUInt32LittleEndian(content[(Size - 4)..], Crc32C.Compute(content[..(Size - 4)]));
        DurableFile.WriteAtomically(PathIn(directory), content, mode);
    }
}
