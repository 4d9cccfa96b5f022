using PersistentServices.Log.Records;

namespace PersistentServices.Domain;

/// <summary>The state a service is known by in a DV: its epoch (failure-free period) and an LSN in it.</summary>
internal readonly record struct StateId(long Epoch, long Lsn) : IComparable<StateId>
{
    public int CompareTo(StateId other) => Epoch != other.Epoch ? Epoch.CompareTo(other.Epoch) : Lsn.CompareTo(other.Lsn);
}

/// <summary>
/// A service's recovered state number (seed 000 §3.1, §4): after a crash it could recover up to <see cref="State"/> in
/// that epoch; everything after it in that epoch is lost, and whatever depends on it is an orphan.
/// </summary>
internal readonly record struct RecoveredStateNumber(string Service, StateId State);

/// <summary>
/// A dependency vector (seed 000 §3.1): for each service, the latest state of it that a session or shared variable
/// depends on. Immutable: merging returns a new vector. Small (one entry per service of the domain).
/// </summary>
internal sealed class DependencyVector
{
    public static readonly DependencyVector Empty = new([]);

    private readonly KeyValuePair<string, StateId>[] _entries;

    private DependencyVector(KeyValuePair<string, StateId>[] entries) => _entries = entries;

    public IReadOnlyList<KeyValuePair<string, StateId>> Entries => _entries;

    public StateId? this[string service]
    {
        get
        {
            foreach (var (name, state) in _entries)
            {
                if (string.Equals(name, service, StringComparison.Ordinal))
                {
                    return state;
                }
            }

            return null;
        }
    }

    /// <summary>This vector with <paramref name="service"/> at least at <paramref name="state"/> (item-wise maximum).</summary>
    public DependencyVector With(string service, StateId state)
    {
        for (var i = 0; i < _entries.Length; i++)
        {
            if (string.Equals(_entries[i].Key, service, StringComparison.Ordinal))
            {
                if (_entries[i].Value.CompareTo(state) >= 0)
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

    /// <summary>Item-wise maximum of both vectors (seed 000 §3.1 "merged").</summary>
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
        => this[recovered.Service] is { } state && state.Epoch == recovered.State.Epoch && state.Lsn > recovered.State.Lsn;

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
        => record is null || record.Entries.Count == 0
            ? Empty
            : new DependencyVector([.. record.Entries.Select(e => new KeyValuePair<string, StateId>(e.Service, new StateId(e.Epoch, e.Lsn)))]);

    public override string ToString() => "[" + string.Join(", ", _entries.Select(e => $"{e.Key}:{e.Value.Epoch}/{e.Value.Lsn}")) + "]";
}
