using Microsoft.Win32.SafeHandles;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>
/// Reads the bytes of a primary's committed log straight from its segment files, for shipping to replicas: the bytes
/// at [from, until) exactly as they are on disk (FASTER's entries, their headers and its commit records, each record in
/// its envelope, sealed when the log is encrypted), so that a replica writing them at the same addresses holds the
/// same log. Bytes below the log's durable end never change (the log only appends), so a read may run beside the log's
/// own writes. Used by one shipper at a time.
/// </summary>
internal sealed class CommittedLogReader(string directory, int segmentSizeBits) : IDisposable
{
    private readonly string _basePath = SegmentFiles.BasePath(directory);
    private readonly Dictionary<int, SafeFileHandle> _handles = [];

    /// <summary>
    /// Fills <paramref name="destination"/> with the bytes at <paramref name="from"/> on (the caller keeps it inside the
    /// log's durable range); false when a segment they lie in is gone (truncated away: the replica needs them from the
    /// log's begin instead).
    /// </summary>
    public bool TryRead(long from, Span<byte> destination)
    {
        var segmentSize = 1L << segmentSizeBits;
        while (!destination.IsEmpty)
        {
            var segment = (int)(from >> segmentSizeBits);
            var offset = from & (segmentSize - 1);
            var chunk = (int)Math.Min(destination.Length, segmentSize - offset);
            if (Handle(segment) is not { } handle)
            {
                return false;
            }

            var read = 0;
            while (read < chunk)
            {
                var n = RandomAccess.Read(handle, destination.Slice(read, chunk - read), offset + read);
                if (n == 0)
                {
                    throw new LogCorruptionException(
                        $"Segment file '{SegmentFiles.PathOf(_basePath, segment)}' ends at offset {offset + read}, inside the log's durable range (address {from + read}).",
                        from + read, SegmentFiles.PathOf(_basePath, segment), offset + read);
                }

                read += n;
            }

            destination = destination[chunk..];
            from += chunk;
        }

        return true;
    }

    /// <summary>Forgets the handles of segments before <paramref name="segment"/> (truncated away).</summary>
    public void ForgetBefore(int segment)
    {
        foreach (var old in _handles.Keys.Where(s => s < segment).ToList())
        {
            _handles.Remove(old, out var handle);
            handle?.Dispose();
        }
    }

    public void Dispose()
    {
        foreach (var handle in _handles.Values)
        {
            handle.Dispose();
        }

        _handles.Clear();
    }

    private SafeFileHandle? Handle(int segment)
    {
        if (_handles.TryGetValue(segment, out var handle))
        {
            return handle;
        }

        try
        {
            handle = File.OpenHandle(SegmentFiles.PathOf(_basePath, segment), FileMode.Open, FileAccess.Read, FileShare.ReadWrite | FileShare.Delete);
        }
        catch (FileNotFoundException)
        {
            return null;
        }

        _handles[segment] = handle;
        return handle;
    }
}
