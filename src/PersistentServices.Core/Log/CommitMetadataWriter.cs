using System.Diagnostics;

namespace PersistentServices.Log;

/// <summary>
/// Keeps the commit metadata's "committed until" floor close behind the log's durable end, off the acknowledgement
/// path (docs/log-format.md, "Commit metadata"). FASTER's commit worker reports each durable commit
/// (<see cref="Report"/>: no I/O, no waiting); this writer's own thread then rewrites <c>commit.meta</c> (one in-place
/// slot write and an <c>fsync</c>), coalescing every commit reported meanwhile, at most once per
/// <see cref="LogOptions.MetadataWriteInterval"/>. Recovery refuses to open a log that ends below the floor, so outside
/// damage that removes committed data is caught unless it lies entirely after the floor: the window this writer keeps
/// short. A write that must be on disk before something else happens (the begin address moved; the log closes) goes
/// through <see cref="WriteNow"/> on the caller's thread. Every write records the componentwise newest state reported so
/// far, so the file never goes backwards.
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
    private readonly Lock _writing = new();
    private readonly double[] _lagsMs = new double[LagSamples];
    private long _begin;
    private long _until;
    private long _commitNum;
    private long _reported;
    private long _firstUnwrittenAt;
    private long _writtenBegin;
    private long _writtenUntil;
    private long _covered;
    private long _writes;
    private long _lagCount;
    private double _maxLagMs;
    private long _maxCommitsPerWrite;
    private long _lastWriteStarted;
    private volatile bool _stopping;
    private volatile bool _failed;

    /// <param name="file">The open metadata file; it already holds (<paramref name="begin"/>, <paramref name="until"/>).</param>
    /// <param name="interval">Least time between two background writes (zero: after every group commit, coalesced).</param>
    /// <param name="begin">The begin address the file holds.</param>
    /// <param name="until">The committed address the file holds.</param>
    /// <param name="commitNum">The FASTER commit number of that commit.</param>
    /// <param name="onFailure">Called once when a background write fails (the log faults itself).</param>
    public CommitMetadataWriter(CommitMetadataFile file, TimeSpan interval, long begin, long until, long commitNum, Action<Exception> onFailure)
    {
        _file = file;
        _intervalTicks = (long)(interval.TotalSeconds * Stopwatch.Frequency);
        _onFailure = onFailure;
        _begin = _writtenBegin = begin;
        _until = _writtenUntil = until;
        _commitNum = commitNum;
        _lastWriteStarted = Stopwatch.GetTimestamp() - _intervalTicks;
        _thread = new Thread(Run) { IsBackground = true, Name = "ps-log-metadata" };
        _thread.Start();
    }

    /// <summary>The committed address the metadata file holds now (the floor recovery will enforce).</summary>
    public long WrittenUntil => Volatile.Read(ref _writtenUntil);

    /// <summary>Metadata writes since open (background and immediate).</summary>
    public long Writes => Volatile.Read(ref _writes);

    /// <summary>Commits reported durable whose end the metadata file does not cover yet.</summary>
    public long UncoveredCommits => Volatile.Read(ref _reported) - Volatile.Read(ref _covered);

    /// <summary>
    /// A commit is durable (called from FASTER's commit worker). Returns at once; the writer's thread records it.
    /// </summary>
    public void Report(long begin, long until, long commitNum)
    {
        lock (_state)
        {
            Advance(begin, until, commitNum);
            _reported++;
            if (_firstUnwrittenAt == 0)
            {
                _firstUnwrittenAt = Stopwatch.GetTimestamp();
            }
        }

        _signal.Set();
    }

    /// <summary>Writes the newest state (including this one) on the calling thread and returns once it is on disk.</summary>
    public void WriteNow(long begin, long until, long commitNum)
    {
        lock (_state)
        {
            Advance(begin, until, commitNum);
        }

        WriteLatest();
    }

    /// <summary>How far behind the durable end the floor has been: lag of each write behind the first commit it covered.</summary>
    public MetadataLag Snapshot()
    {
        lock (_writing)
        {
            var count = (int)Math.Min(_lagCount, LagSamples);
            var sorted = _lagsMs.AsSpan(0, count).ToArray();
            Array.Sort(sorted);
            double Percentile(double p) => count == 0 ? 0 : sorted[Math.Min(count - 1, (int)(p * count))];
            return new MetadataLag(_writes, Percentile(0.5), Percentile(0.99), _maxLagMs, _writes == 0 ? 0 : (double)_covered / _writes, _maxCommitsPerWrite);
        }
    }

    /// <summary>Stops the background thread (it finishes a write in progress). <see cref="WriteNow"/> still works afterwards.</summary>
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

    private void Run()
    {
        while (true)
        {
            _signal.WaitOne();
            if (_stopping)
            {
                return;
            }

            var wait = _lastWriteStarted + _intervalTicks - Stopwatch.GetTimestamp();
            if (wait > 0)
            {
                Thread.Sleep(TimeSpan.FromSeconds((double)wait / Stopwatch.Frequency));
            }

            _lastWriteStarted = Stopwatch.GetTimestamp();
            try
            {
                WriteLatest();
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException or ObjectDisposedException)
            {
                _failed = true;
                _onFailure(ex);
                return;
            }
        }
    }

    private void WriteLatest()
    {
        lock (_writing)
        {
            if (_failed)
            {
                throw new IOException("An earlier commit metadata write failed.");
            }

            long begin, until, commitNum, firstAt, reported;
            lock (_state)
            {
                (begin, until, commitNum, reported) = (_begin, _until, _commitNum, _reported);
                firstAt = _firstUnwrittenAt;
                _firstUnwrittenAt = 0;
            }

            if (until == _writtenUntil && begin == _writtenBegin)
            {
                Volatile.Write(ref _covered, reported);
                return;
            }

            _file.Write(begin, until, commitNum);
            _writtenBegin = begin;
            Volatile.Write(ref _writtenUntil, until);
            _maxCommitsPerWrite = Math.Max(_maxCommitsPerWrite, reported - _covered);
            Volatile.Write(ref _covered, reported);
            Volatile.Write(ref _writes, _writes + 1);
            if (firstAt != 0)
            {
                var lag = Stopwatch.GetElapsedTime(firstAt).TotalMilliseconds;
                _lagsMs[_lagCount++ % LagSamples] = lag;
                _maxLagMs = Math.Max(_maxLagMs, lag);
            }
        }
    }
}

/// <summary>
/// How closely the commit metadata followed the durable end: per write, the time from the first commit it newly covered
/// being reported durable until the write was on disk (p50, p99 over the last 4096 writes; max since open), and how many
/// commits each write covered.
/// </summary>
internal readonly record struct MetadataLag(long Writes, double P50Ms, double P99Ms, double MaxMs, double MeanCommitsPerWrite, long MaxCommitsPerWrite);
