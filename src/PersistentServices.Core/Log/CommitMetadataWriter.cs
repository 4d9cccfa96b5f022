using System.Diagnostics;

namespace PersistentServices.Log;

/// <summary>
/// Keeps the commit metadata's "committed until" floor right behind the log's durable end, off the acknowledgement path
/// (docs/log-format.md, "Commit metadata"). Recovery refuses to open a log that ends below the floor, so damage from
/// outside that removes committed data is caught unless it lies entirely after the floor: the window this writer keeps
/// short.
/// <list type="bullet">
/// <item>FASTER reports each durable commit from its commit worker, after it has released the commit's waiters
///   (<see cref="Report"/>). The new floor is written into <c>commit.meta</c> at once, into the operating system's cache:
///   one 512-byte <c>pwrite</c>, no flush. From then on every reader of the file (a restarted service, a copy, psctl) sees
///   it, and it survives the process being killed.</item>
/// <item>This writer's own thread makes it durable (<c>fdatasync</c>) at most once per
///   <see cref="LogOptions.MetadataFlushInterval"/>, so under load the flush costs one small write per interval, not
///   one per commit. Until then a power loss can only lose floor updates, never make the floor exceed what is durable:
///   every floor written is an address FASTER already made durable.</item>
/// <item>What must be durable before something else happens (the begin address moved and FASTER is about to delete
///   segment files; the log closes) goes through <see cref="WriteNow"/>: written and flushed on the caller's thread.</item>
/// </list>
/// Every write records the componentwise newest state reported so far, so the file never goes backwards.
/// </summary>
internal sealed class CommitMetadataWriter : IDisposable
{
    private const int LagSamples = 4096;

    private readonly CommitMetadataFile _file;
    private readonly long _intervalTicks;
    private readonly Action<Exception> _onFailure;
    private readonly Thread _thread;
    private readonly AutoResetEvent _signal = new(false);
    private readonly Lock _state = new();
    private readonly Lock _flushing = new();
    private readonly double[] _lagsMs = new double[LagSamples];
    private long _begin;
    private long _until;
    private long _commitNum;
    private long _writtenBegin;
    private long _writtenUntil;
    private long _flushedUntil;
    private long _reported;
    private long _flushedReports;
    private long _firstUnflushedAt;
    private long _writes;
    private long _flushes;
    private long _lagCount;
    private double _maxLagMs;
    private long _maxCommitsPerFlush;
    private long _lastFlushStarted;
    private int _signalled;
    private volatile bool _stopping;
    private volatile bool _failed;
    private volatile bool _closed;

    /// <param name="file">The open metadata file; it already holds (<paramref name="begin"/>, <paramref name="until"/>), flushed.</param>
    /// <param name="interval">Least time between two background flushes.</param>
    /// <param name="begin">The begin address the file holds.</param>
    /// <param name="until">The committed address the file holds.</param>
    /// <param name="commitNum">The FASTER commit number of that commit.</param>
    /// <param name="onFailure">Called once when a write or flush fails (the log faults itself).</param>
    public CommitMetadataWriter(CommitMetadataFile file, TimeSpan interval, long begin, long until, long commitNum, Action<Exception> onFailure)
    {
        _file = file;
        _intervalTicks = (long)(interval.TotalSeconds * Stopwatch.Frequency);
        _onFailure = onFailure;
        _begin = _writtenBegin = begin;
        _until = _writtenUntil = _flushedUntil = until;
        _commitNum = commitNum;
        _lastFlushStarted = Stopwatch.GetTimestamp() - _intervalTicks;
        _thread = new Thread(Run) { IsBackground = true, Name = "ps-log-metadata" };
        _thread.Start();
    }

    /// <summary>The committed address the metadata file shows now (written, perhaps not yet flushed): the floor the next open enforces.</summary>
    public long WrittenUntil => Volatile.Read(ref _writtenUntil);

    /// <summary>The committed address the metadata file holds durably (flushed).</summary>
    public long FlushedUntil => Volatile.Read(ref _flushedUntil);

    /// <summary>Metadata writes since open.</summary>
    public long Writes => Volatile.Read(ref _writes);

    /// <summary>Metadata flushes since open.</summary>
    public long Flushes => Volatile.Read(ref _flushes);

    /// <summary>Commits reported durable whose end the flushed metadata does not cover yet.</summary>
    public long UnflushedCommits => Volatile.Read(ref _reported) - Volatile.Read(ref _flushedReports);

    /// <summary>
    /// A commit is durable (called from FASTER's commit worker once the commit's waiters are released): writes the new floor
    /// into the file, unflushed, and lets this writer's thread flush it within the interval. No disk wait.
    /// </summary>
    public void Report(long begin, long until, long commitNum)
    {
        lock (_state)
        {
            Advance(begin, until, commitNum);
            _reported++;
            if (_firstUnflushedAt == 0)
            {
                _firstUnflushedAt = Stopwatch.GetTimestamp();
            }

            if (_closed || _failed || (until <= _writtenUntil && begin <= _writtenBegin))
            {
                return;
            }

            try
            {
                WriteLatest();
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ObjectDisposedException)
            {
                Fail(ex);
                return;
            }
        }

        if (Interlocked.Exchange(ref _signalled, 1) == 0 && !_stopping)
        {
            try
            {
                _signal.Set();
            }
            catch (ObjectDisposedException)
            {
                // Closing: the final write covers this commit.
            }
        }
    }

    /// <summary>Writes the newest state (including this one) and flushes it, on the calling thread.</summary>
    public void WriteNow(long begin, long until, long commitNum)
    {
        long reported;
        long firstAt;
        lock (_state)
        {
            Advance(begin, until, commitNum);
            if (_closed)
            {
                return;
            }

            if (_failed)
            {
                throw new IOException("An earlier commit metadata write failed.");
            }

            if (_until != _writtenUntil || _begin != _writtenBegin)
            {
                WriteLatest();
            }

            reported = _reported;
            firstAt = _firstUnflushedAt;
            _firstUnflushedAt = 0;
        }

        FlushWritten(reported, firstAt);
    }

    /// <summary>
    /// The last write, when the log closes (after <see cref="Dispose"/>): everything durable, flushed. Later reports (FASTER's
    /// commit worker can trail the last commit's waiters) are covered by it and ignored.
    /// </summary>
    public void WriteFinal(long begin, long until, long commitNum)
    {
        WriteNow(begin, until, commitNum);
        _closed = true;
    }

    /// <summary>How far behind the durable end the flushed floor has been, and how many commits each flush covered.</summary>
    public MetadataLag Snapshot()
    {
        lock (_flushing)
        {
            var count = (int)Math.Min(_lagCount, LagSamples);
            var sorted = _lagsMs.AsSpan(0, count).ToArray();
            Array.Sort(sorted);
            double Percentile(double p) => count == 0 ? 0 : sorted[Math.Min(count - 1, (int)(p * count))];
            return new MetadataLag(Writes, _flushes, Percentile(0.5), Percentile(0.99), _maxLagMs,
                _flushes == 0 ? 0 : (double)Volatile.Read(ref _flushedReports) / _flushes, _maxCommitsPerFlush);
        }
    }

    /// <summary>Stops the flushing thread (it finishes a flush in progress). <see cref="WriteNow"/> still works afterwards.</summary>
    public void Dispose()
    {
        if (_stopping)
        {
            return;
        }

        _stopping = true;
        _signal.Set();
        _thread.Join();
        _signal.Dispose();
    }

    private void Advance(long begin, long until, long commitNum)
    {
        _begin = Math.Max(_begin, begin);
        _until = Math.Max(_until, until);
        _commitNum = Math.Max(_commitNum, commitNum);
    }

    /// <summary>Writes the newest state, unflushed. Under <see cref="_state"/>.</summary>
    private void WriteLatest()
    {
        _file.WriteUnflushed(_begin, _until, _commitNum);
        _writtenBegin = _begin;
        Volatile.Write(ref _writtenUntil, _until);
        Volatile.Write(ref _writes, _writes + 1);
    }

    // The thread's whole life is this loop: compiled optimized at once (a tier-0 loop is only replaced on stack later).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    private void Run()
    {
        while (true)
        {
            _signal.WaitOne();
            if (_stopping)
            {
                return;
            }

            var wait = _lastFlushStarted + _intervalTicks - Stopwatch.GetTimestamp();
            if (wait > 0)
            {
                // Sleep takes whole milliseconds: round up, or a sub-millisecond wait would not wait at all.
                Thread.Sleep((int)Math.Ceiling(wait * 1000.0 / Stopwatch.Frequency));
            }

            _lastFlushStarted = Stopwatch.GetTimestamp();
            Volatile.Write(ref _signalled, 0);
            long reported;
            long firstAt;
            lock (_state)
            {
                reported = _reported;
                firstAt = _firstUnflushedAt;
                _firstUnflushedAt = 0;
            }

            try
            {
                FlushWritten(reported, firstAt);
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ObjectDisposedException)
            {
                lock (_state)
                {
                    Fail(ex);
                }

                return;
            }
        }
    }

    /// <summary>Flushes what was written; <paramref name="reported"/> commits, the first reported at <paramref name="firstAt"/>, are then durable in the floor.</summary>
    private void FlushWritten(long reported, long firstAt)
    {
        lock (_flushing)
        {
            var written = Volatile.Read(ref _writtenUntil);
            _file.Flush();
            Volatile.Write(ref _flushedUntil, Math.Max(_flushedUntil, written));
            _maxCommitsPerFlush = Math.Max(_maxCommitsPerFlush, reported - _flushedReports);
            Volatile.Write(ref _flushedReports, Math.Max(_flushedReports, reported));
            Volatile.Write(ref _flushes, _flushes + 1);
            if (firstAt != 0)
            {
                var lag = Stopwatch.GetElapsedTime(firstAt).TotalMilliseconds;
                _lagsMs[_lagCount++ % LagSamples] = lag;
                _maxLagMs = Math.Max(_maxLagMs, lag);
            }
        }
    }

    /// <summary>Under <see cref="_state"/>.</summary>
    private void Fail(Exception error)
    {
        if (_failed)
        {
            return;
        }

        _failed = true;
        _onFailure(error);
    }
}

/// <summary>
/// How closely the commit metadata followed the durable end. Every commit's floor is written (unflushed) as FASTER
/// reports it; per flush: the time from the first commit it newly made durable in the floor being reported until the
/// flush completed (p50, p99 over the last 4096 flushes; max since open), and how many commits each flush covered.
/// </summary>
internal readonly record struct MetadataLag(long Writes, long Flushes, double P50Ms, double P99Ms, double MaxMs, double MeanCommitsPerFlush, long MaxCommitsPerFlush);
