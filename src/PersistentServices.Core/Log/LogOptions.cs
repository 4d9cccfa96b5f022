using FASTER.core;
using PersistentServices.Log;

namespace PersistentServices;

/// <summary>Options of the durable log. Validated when the log is opened.</summary>
public sealed class LogOptions
{
    /// <summary>Bytes per record envelope and FASTER entry header; records must fit a page with this overhead.</summary>
    internal const int EntryOverhead = FasterEntryLayout.HeaderSize + RecordEnvelope.HeaderSize;

    /// <summary>Directory that holds the log's files (segments <c>log.N</c>, <c>commit.meta</c>, <c>directory.lock</c>; FASTER owns every <c>log.*</c> name). Required.</summary>
    public string Directory { get; set; } = "";

    /// <summary>
    /// The mode of the files in the log directory on Unix (the directory gets the same, with execute where read is given).
    /// The log holds requests' bodies and headers and replies (docs/operations.md, "What the log holds"). Default
    /// <c>UserRead | UserWrite</c>: files 0600, directory 0700, readable by the service's user only; a log directory created
    /// by an older build (0755, files 0644) is narrowed when the log opens. Widen it only for a backup agent that runs as
    /// another user of the same group (<c>| GroupRead</c>: 0640 and 0750). Must include <c>UserRead | UserWrite</c>.
    /// </summary>
    public UnixFileMode FileMode { get; set; } = UnixFileMode.UserRead | UnixFileMode.UserWrite;

    /// <summary>log2 of the page size. Default 22 (4 MiB). A record must fit in one page.</summary>
    public int PageSizeBits { get; set; } = 22;

    /// <summary>log2 of the in-memory buffer of pages. Default 25 (32 MiB). At least two pages.</summary>
    public int MemorySizeBits { get; set; } = 25;

    /// <summary>log2 of a segment file's size. Default 30 (1 GiB).</summary>
    public int SegmentSizeBits { get; set; } = 30;

    /// <summary>Largest record body accepted by append, in bytes. Default 1 MiB; at most half a page.</summary>
    public int MaxRecordBytes { get; set; } = 1 << 20;

    /// <summary>
    /// Least time between two flushes of the commit metadata (<c>commit.meta</c>: the begin address and a committed
    /// address, the floor that recovery never accepts the log to fall below). Commit records in the log make every commit
    /// durable with one write. The floor is written into <c>commit.meta</c> right after every commit, off the
    /// acknowledgement path and without a flush, so a restarted service or a copy sees it at once; it is flushed to disk
    /// on the log's metadata thread at most once per this interval, and at once when the begin address moves. Only after
    /// an operating-system crash or power loss can the floor be older than the last commits, by at most this interval.
    /// Default 10 ms; zero flushes after every group commit (one more flush per commit under load); at most 10 s.
    /// </summary>
    public TimeSpan MetadataFlushInterval { get; set; } = TimeSpan.FromMilliseconds(10);

    /// <summary>
    /// Bytes of zeros the log keeps written ahead of its tail, refilled on a thread-pool thread when less than this is left
    /// (docs/log-format.md, "Zeroed space after the data"): a commit's <c>O_DSYNC</c> write then lands on bytes that exist
    /// and needs no inode write of its own. Default 4 MiB (the file holds up to twice this past its data). 0 turns the fill
    /// off: every commit that reaches past the file's end makes the file longer, as FASTER's own device does; choose it on
    /// a copy-on-write or thin-provisioned file system, where a write over zeros is not cheaper. A multiple of 4096, at
    /// most 1 GiB; a fill never goes past its segment's end. Has no effect where the log cannot write with <c>O_DIRECT</c>
    /// (tmpfs).
    /// </summary>
    public int ZeroFillBytes { get; set; } = DirectFileDevice.DefaultZeroFillBytes;

    /// <summary>
    /// Encryption of the records at rest (AES-256-GCM with a key the application provides; docs/operations.md, "Encrypting
    /// the log"). No key (the default): records are written in clear, as every build before this one wrote them.
    /// </summary>
    public LogEncryptionOptions Encryption { get; private set; } = new();

    /// <summary>Test hook: builds the FASTER device for a segment base path (fault injection).</summary>
    internal Func<string, LogIoThread, IDevice>? DeviceFactory { get; set; }

    internal int PageSize => 1 << PageSizeBits;

    /// <summary>Throws <see cref="ArgumentException"/> naming the first invalid option.</summary>
    public void Validate()
    {
        if (string.IsNullOrWhiteSpace(Directory))
        {
            throw new ArgumentException("LogOptions.Directory is required: the directory that holds the log files.", nameof(Directory));
        }

        const UnixFileMode ownerReadWrite = UnixFileMode.UserRead | UnixFileMode.UserWrite;
        const UnixFileMode allowed = ownerReadWrite | UnixFileMode.GroupRead | UnixFileMode.GroupWrite | UnixFileMode.OtherRead | UnixFileMode.OtherWrite;
        if ((FileMode & ownerReadWrite) != ownerReadWrite || (FileMode & ~allowed) != 0)
        {
            throw new ArgumentException(
                $"LogOptions.FileMode must include UserRead | UserWrite and hold only read and write bits (was {FileMode}); the default, owner only (0600), keeps the log's requests and replies from other local users.",
                nameof(FileMode));
        }

        if (PageSizeBits is < 12 or > 28)
        {
            throw new ArgumentException($"LogOptions.PageSizeBits must be between 12 and 28 (was {PageSizeBits}).", nameof(PageSizeBits));
        }

        if (MemorySizeBits < PageSizeBits + 1 || MemorySizeBits > 34)
        {
            throw new ArgumentException(
                $"LogOptions.MemorySizeBits must hold at least two pages (>= PageSizeBits + 1 = {PageSizeBits + 1}) and at most 34 (was {MemorySizeBits}).",
                nameof(MemorySizeBits));
        }

        if (SegmentSizeBits < PageSizeBits || SegmentSizeBits > 40)
        {
            throw new ArgumentException(
                $"LogOptions.SegmentSizeBits must be between PageSizeBits ({PageSizeBits}) and 40 (was {SegmentSizeBits}).",
                nameof(SegmentSizeBits));
        }

        Encryption.Validate();
        var overhead = EntryOverhead + (string.IsNullOrWhiteSpace(Encryption.Key) ? 0 : RecordEnvelope.SealedOverhead);
        var maxBody = PageSize / 2 - overhead;
        if (MaxRecordBytes < 64 || MaxRecordBytes > maxBody)
        {
            throw new ArgumentException(
                $"LogOptions.MaxRecordBytes must be between 64 and half a page less the {overhead}-byte headers ({maxBody} for PageSizeBits {PageSizeBits}); was {MaxRecordBytes}.",
                nameof(MaxRecordBytes));
        }

        if (ZeroFillBytes < 0 || ZeroFillBytes % 4096 != 0 || ZeroFillBytes > 1 << 30)
        {
            throw new ArgumentException(
                $"LogOptions.ZeroFillBytes must be 0 (no zero fill) or a multiple of 4096 of at most 1 GiB; was {ZeroFillBytes}.",
                nameof(ZeroFillBytes));
        }

        if (MetadataFlushInterval < TimeSpan.Zero || MetadataFlushInterval > TimeSpan.FromSeconds(10))
        {
            throw new ArgumentException($"LogOptions.MetadataFlushInterval must be between 0 and 10 seconds (was {MetadataFlushInterval}).", nameof(MetadataFlushInterval));
        }
    }

    internal LogOptions Clone()
    {
        var clone = (LogOptions)MemberwiseClone();
        clone.Encryption = Encryption.Clone();
        return clone;
    }
}
