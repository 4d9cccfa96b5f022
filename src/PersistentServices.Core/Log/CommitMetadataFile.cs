using System.Buffers.Binary;
using Microsoft.Win32.SafeHandles;

namespace PersistentServices.Log;

/// <summary>
/// What the commit metadata records: the log's begin address and a committed address (the floor recovery may never fall
/// below), and the log's geometry (page and segment size bits; 0 when written by a build that did not record them).
/// </summary>
internal readonly record struct CommitMetadata(long Sequence, long BeginAddress, long CommittedUntil, long CommitNum, byte PageSizeBits = 0, byte SegmentSizeBits = 0);

/// <summary>
/// The log's commit metadata, written in place in two checksummed slots (<c>commit.meta</c>, docs/log-format.md).
/// Each write goes to the slot not holding the newest valid copy, then is flushed; a torn write damages at most
/// that slot, and the reader takes the valid slot with the highest sequence.
/// <code>
/// slot (512 bytes, at offset 0 or 512):
///  0 "PSLM"   4 uint16 version (1)   6 uint8 page size bits   7 uint8 segment size bits (0: not recorded)
///  8 int64 sequence   16 int64 begin address   24 int64 committed until   32 int64 FASTER commit number
/// 40 uint32 CRC-32C over [0, 40)
/// </code>
/// </summary>
internal sealed class CommitMetadataFile : IDisposable
{
    public const string FileName = "commit.meta";
    private const int SlotSize = 512;
    private const int SlotPayload = 40;
    private const ushort Version = 1;
    private static ReadOnlySpan<byte> Magic => "PSLM"u8;

    private readonly SafeFileHandle _handle;
    private readonly FileStream _stream;
    private readonly byte[] _buffer = new byte[SlotSize];
    private readonly Lock _gate = new();
    private readonly byte _pageSizeBits;
    private readonly byte _segmentSizeBits;
    private long _sequence;

    private CommitMetadataFile(string path, FileStream stream, long sequence, byte pageSizeBits, byte segmentSizeBits)
    {
        Path = path;
        _stream = stream;
        _handle = stream.SafeFileHandle;
        _sequence = sequence;
        _pageSizeBits = pageSizeBits;
        _segmentSizeBits = segmentSizeBits;
    }

    public string Path { get; }

    /// <summary>Reads both slots of an existing file. Returns the newest valid copy and describes damaged slots.</summary>
    public static (CommitMetadata? Newest, IReadOnlyList<string> Damage) Read(string path)
    {
        var damage = new List<string>();
        if (!File.Exists(path))
        {
            return (null, damage);
        }

        var bytes = File.ReadAllBytes(path);
        CommitMetadata? newest = null;
        for (var slot = 0; slot < 2; slot++)
        {
            var start = slot * SlotSize;
            if (bytes.Length < start + SlotPayload + 4)
            {
                damage.Add($"slot {slot}: file is {bytes.Length} bytes, too short");
                continue;
            }

            var reason = Parse(bytes.AsSpan(start, SlotPayload + 4), out var metadata);
            if (reason is not null)
            {
                damage.Add($"slot {slot}: {reason}");
            }
            else if (newest is null || metadata.Sequence > newest.Value.Sequence)
            {
                newest = metadata;
            }
        }

        return (newest, damage);
    }

    /// <summary>Creates the file durably (temp, fsync, rename, fsync dir) holding <paramref name="initial"/>, and opens it for in-place writes.</summary>
    public static CommitMetadataFile Create(string path, CommitMetadata initial, UnixFileMode mode = DurableFile.OwnerOnly)
    {
        var content = new byte[2 * SlotSize];
        var first = initial with { Sequence = 1 };
        Format(content.AsSpan(0, SlotSize), first);
        DurableFile.WriteAtomically(path, content, mode);
        var stream = new FileStream(path, FileMode.Open, FileAccess.ReadWrite, FileShare.Read);
        return new CommitMetadataFile(path, stream, first.Sequence, first.PageSizeBits, first.SegmentSizeBits);
    }

    /// <summary>
    /// Opens an existing file for in-place writes; <paramref name="newestSequence"/> is the newest valid slot's sequence.
    /// Every later write records the geometry given here.
    /// </summary>
    public static CommitMetadataFile Open(string path, long newestSequence, byte pageSizeBits, byte segmentSizeBits)
    {
        var stream = new FileStream(path, FileMode.Open, FileAccess.ReadWrite, FileShare.Read);
        if (stream.Length < 2 * SlotSize)
        {
            stream.SetLength(2 * SlotSize);
        }

        return new CommitMetadataFile(path, stream, newestSequence, pageSizeBits, segmentSizeBits);
    }

    /// <summary>Writes a new copy into the older slot and flushes it to disk. Safe to call from several threads.</summary>
    public void Write(long beginAddress, long committedUntil, long commitNum)
    {
        WriteUnflushed(beginAddress, committedUntil, commitNum);
        Flush();
    }

    /// <summary>
    /// Writes a new copy into the older slot, into the operating system's cache only: every reader of the file sees it at
    /// once, and it survives the process; it survives a power loss only after <see cref="Flush"/>. Two slots stay in one
    /// page: after a power loss each 512-byte slot holds either its old or its new content, and the reader takes the
    /// newest valid one.
    /// </summary>
    public void WriteUnflushed(long beginAddress, long committedUntil, long commitNum)
    {
        lock (_gate)
        {
            var metadata = new CommitMetadata(++_sequence, beginAddress, committedUntil, commitNum, _pageSizeBits, _segmentSizeBits);
            Array.Clear(_buffer);
            Format(_buffer, metadata);
            RandomAccess.Write(_handle, _buffer, (metadata.Sequence % 2 == 1 ? 0 : 1) * SlotSize);
        }
    }

    /// <summary>Makes every write so far durable (<c>fdatasync</c>: the slots are overwritten in place, the size never changes).</summary>
    public void Flush() => DurableFile.FlushData(_handle);

    public void Dispose()
    {
        lock (_gate)
        {
            _stream.Dispose();
        }
    }

    private static void Format(Span<byte> slot, CommitMetadata metadata)
    {
        Magic.CopyTo(slot);
        BinaryPrimitives.WriteUInt16LittleEndian(slot[4..], Version);
        slot[6] = metadata.PageSizeBits;
        slot[7] = metadata.SegmentSizeBits;
        BinaryPrimitives.WriteInt64LittleEndian(slot[8..], metadata.Sequence);
        BinaryPrimitives.WriteInt64LittleEndian(slot[16..], metadata.BeginAddress);
        BinaryPrimitives.WriteInt64LittleEndian(slot[24..], metadata.CommittedUntil);
        BinaryPrimitives.WriteInt64LittleEndian(slot[32..], metadata.CommitNum);
        BinaryPrimitives.WriteUInt32LittleEndian(slot[SlotPayload..], Crc32C.Compute(slot[..SlotPayload]));
    }

    private static string? Parse(ReadOnlySpan<byte> slot, out CommitMetadata metadata)
    {
        metadata = default;
        if (!slot[..4].SequenceEqual(Magic))
        {
            return slot[..SlotPayload].IndexOfAnyExcept((byte)0) < 0 ? "empty" : "bad magic";
        }

        var crc = BinaryPrimitives.ReadUInt32LittleEndian(slot[SlotPayload..]);
        if (crc != Crc32C.Compute(slot[..SlotPayload]))
        {
            return "CRC-32C mismatch";
        }

        var version = BinaryPrimitives.ReadUInt16LittleEndian(slot[4..]);
        if (version != Version)
        {
            throw new LogFormatException($"Commit metadata slot has version {version}; this build reads version {Version}.");
        }

        metadata = new CommitMetadata(
            BinaryPrimitives.ReadInt64LittleEndian(slot[8..]),
            BinaryPrimitives.ReadInt64LittleEndian(slot[16..]),
            BinaryPrimitives.ReadInt64LittleEndian(slot[24..]),
            BinaryPrimitives.ReadInt64LittleEndian(slot[32..]),
            slot[6],
            slot[7]);
        if (metadata.BeginAddress < FasterEntryLayout.FirstValidAddress || metadata.CommittedUntil < metadata.BeginAddress)
        {
            return $"inconsistent addresses (begin {metadata.BeginAddress}, committed until {metadata.CommittedUntil})";
        }

        return null;
    }
}
