using PersistentServices.Log.Records;

namespace PersistentServices.Domain;

/// <summary>The state a service is known by in a DV: its epoch (failure-free period) and an LSN in it.</summary>
internal readonly record struct StateId(long Epoch, long Lsn) : IComparable<StateId>
{
    public int CompareTo(StateId other) => Epoch != other.Epoch ? Epoch.CompareTo(other.Epoch) : Lsn.CompareTo(other.Lsn);
}

/// <summary>
/// A service's recovered state number ([MSP §3.1, §4]): after a crash it could recover up to <see cref="State"/> in
/// that epoch; everything after it in that epoch is lost, and whatever depends on it is an orphan.
/// </summary>
internal readonly record struct RecoveredStateNumber(string Service, StateId State);

/// <summary>
/// A dependency vector ([MSP §3.1]): the latest state of each service a session or shared variable depends on, as
/// (epoch, LSN). Kept per (service, epoch): a dependency on a service's earlier epoch is not hidden by a later one (a
/// message from a member's new epoch must not make the receiver forget that it still depends on what the member had
/// before its crash, until the member's recovered state number for that epoch shows whether it survived). Entries for an
/// epoch whose recovered state number shows them durable are dropped (<see cref="Prune"/>), so the vector stays small:
/// about one entry per service of the domain. Immutable: merging returns a new vector.
/// </summary>
internal sealed class DependencyVector
{
    public static readonly DependencyVector Empty = new([]);

    private readonly KeyValuePair<string, StateId>[] _entries;

    private DependencyVector(KeyValuePair<string, StateId>[] entries) => _entries = entries;

    public IReadOnlyList<KeyValuePair<string, StateId>> Entries => _entries;

    /// <summary>The latest state of <paramref name="service"/> this vector depends on (its newest epoch), or null.</summary>
    public StateId? this[string service]
    {
        get
        {
            StateId? latest = null;
            foreach (var (name, state) in _entries)
            {
                if (string.Equals(name, service, StringComparison.Ordinal) && (latest is null || state.CompareTo(latest.Value) > 0))
                {
                    latest = state;
                }
            }

            return latest;
        }
    }

    /// <summary>This vector with <paramref name="service"/> at least at <paramref name="state"/> in its epoch (item-wise maximum).</summary>
    public DependencyVector With(string service, StateId state)
    {
        for (var i = 0; i < _entries.Length; i++)
        {
            if (string.Equals(_entries[i].Key, service, StringComparison.Ordinal) && _entries[i].Value.Epoch == state.Epoch)
            {
                if (_entries[i].Value.Lsn >= state.Lsn)
                {
                    return this;
                }

                var copy = new KeyValuePair<string, StateId>[_entries.Length];
                _entries.CopyTo(copy, 0);
                copy[i] = new(service, state);
                return new DependencyVector(copy);
            }
        }

        return new DependencyVector([.. _entries, new(service, state)]);
    }

    /// <summary>
    /// This vector with <paramref name="service"/> at <paramref name="state"/> and without that service's entries of
    /// earlier epochs: a service's own dependency on itself ([MSP §3.1]). Its earlier epochs are behind a recovery of its
    /// own, and whatever of them is still in its memory was read back from its durable log, so those entries can never
    /// make anything an orphan; kept, they would grow every session's and shared variable's DV by one entry per restart
    /// (and every logged shared access with it).
    /// </summary>
    public DependencyVector WithOwn(string service, StateId state)
    {
        var stale = 0;
        foreach (var (name, entry) in _entries)
        {
            if (entry.Epoch < state.Epoch && string.Equals(name, service, StringComparison.Ordinal))
            {
                stale++;
            }
        }

        if (stale == 0)
        {
            return With(service, state);
        }

        var kept = new KeyValuePair<string, StateId>[_entries.Length - stale];
        var i = 0;
        foreach (var entry in _entries)
        {
            if (entry.Value.Epoch >= state.Epoch || !string.Equals(entry.Key, service, StringComparison.Ordinal))
            {
                kept[i++] = entry;
            }
        }

        return new DependencyVector(kept).With(service, state);
    }

    /// <summary>Item-wise maximum of both vectors, per (service, epoch) ([MSP §3.1] "merged").</summary>
    public DependencyVector Merge(DependencyVector other)
    {
        var result = this;
        foreach (var (service, state) in other._entries)
        {
            result = result.With(service, state);
        }

        return result;
    }

    /// <summary>True when this vector depends on state that <paramref name="recovered"/> says was lost.</summary>
    public bool IsOrphan(RecoveredStateNumber recovered)
    {
        foreach (var (service, state) in _entries)
        {
            if (string.Equals(service, recovered.Service, StringComparison.Ordinal) && state.Epoch == recovered.State.Epoch && state.Lsn > recovered.State.Lsn)
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>
    /// Without the entries <paramref name="recovered"/> shows durable (a past epoch recovered at or beyond them): they can
    /// never make this vector an orphan. Entries it shows lost are kept.
    /// </summary>
    public DependencyVector Prune(RecoveredStates recovered)
    {
        List<KeyValuePair<string, StateId>>? kept = null;
        for (var i = 0; i < _entries.Length; i++)
        {
            var (service, state) = _entries[i];
            var durable = recovered.RecoveredLsn(service, state.Epoch) is { } r && state.Lsn <= r;
            if (durable && kept is null)
            {
                kept = [.. _entries.Take(i)];
            }
            else if (!durable)
            {
                kept?.Add(_entries[i]);
            }
        }

        return kept is null ? this : new DependencyVector([.. kept]);
    }

    public LoggedDependencyVector ToRecord()
    {
        var record = new LoggedDependencyVector();
        foreach (var (service, state) in _entries)
        {
            record.Entries.Add(new LoggedDependency { Service = service, Epoch = state.Epoch, Lsn = state.Lsn });
        }

        return record;
    }

    public static DependencyVector FromRecord(LoggedDependencyVector? record)
    {
        if (record is null || record.Entries.Count == 0)
        {
            return Empty;
        }

        var dv = Empty;
        foreach (var entry in record.Entries)
        {
            dv = dv.With(entry.Service, new StateId(entry.Epoch, entry.Lsn));
        }

        return dv;
    }

    public override string ToString() => "[" + string.Join(", ", _entries.Select(e => $"{e.Key}:{e.Value.Epoch}/{e.Value.Lsn}")) + "]";
}
