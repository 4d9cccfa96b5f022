using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// Classifies one operation: a nondeterministic API (PS0201), an external input or process fact (PS0202), a write to
/// memory that outlives the request (PS0102), and the calls into source methods to follow. The same classification
/// runs on persistent code and on the methods it calls (docs/diagnostics.md lists what each rule detects). One rule per
/// file: <c>ReplayHazards.Nondeterminism.cs</c> (PS0201), <c>.ExternalInput.cs</c> (PS0202), <c>.StateWrites.cs</c> (PS0102),
/// <c>.CallEdges.cs</c> (the calls to follow).
/// </summary>
internal static partial class ReplayHazards
{
    private static readonly HashSet<string> CollectionMutators = new(StringComparer.Ordinal)
    {
        "Add", "AddRange", "AddFirst", "AddLast", "AddBefore", "AddAfter", "Insert", "InsertRange",
        "Remove", "RemoveAt", "RemoveAll", "RemoveRange", "RemoveFirst", "RemoveLast", "RemoveWhere", "Clear",
        "Push", "PushRange", "Pop", "TryPop", "TryPopRange", "Enqueue", "EnqueueRange", "Dequeue", "TryDequeue",
        "TryAdd", "TryRemove", "TryUpdate", "AddOrUpdate", "GetOrAdd", "Take", "TryTake", "CompleteAdding",
        "Set", "SetAll", "Sort", "Reverse", "TrimExcess", "EnsureCapacity",
        "UnionWith", "IntersectWith", "ExceptWith", "SymmetricExceptWith",
    };

    private static readonly HashSet<string> ObjectMembers = new(StringComparer.Ordinal)
    {
        "Dispose", "DisposeAsync", "Close", "GetType", "ToString", "Equals", "GetHashCode",
    };

    private static readonly HashSet<string> FileSystemInfoProperties = new(StringComparer.Ordinal)
    {
        "Exists", "Length", "Attributes", "CreationTime", "CreationTimeUtc", "LastAccessTime", "LastAccessTimeUtc",
        "LastWriteTime", "LastWriteTimeUtc", "IsReadOnly", "LinkTarget", "UnixFileMode",
    };

    /// <summary>
    /// A cheap first look (before persistent code is checked): false when <paramref name="operation"/> cannot matter
    /// (an argument passed by value, a field read of no nondeterministic field).
    /// </summary>
    public static bool MayMatter(IOperation operation) => operation switch
    {
        IArgumentOperation argument => argument.Parameter?.RefKind is RefKind.Ref or RefKind.Out,
        IFieldReferenceOperation reference => IsNondeterministicMember(reference.Field),
        _ => true,
    };

    /// <summary>
    /// Adds what <paramref name="operation"/> itself does (not its children): findings, and calls into methods of this
    /// compilation that the caller may follow.
    /// </summary>
    public static void Classify(
        IOperation operation,
        ReplayAnalysis analysis,
        WriteScope scope,
        List<ReplayFinding> findings,
        List<CallEdge> edges,
        CancellationToken cancellationToken)
    {
        if (Operations.IsInNameOf(operation))
        {
            return;
        }

        if (DescribeNondeterministic(operation) is { } api && DescribeNondeterministic(GetReceiverOf(operation)) is null)
        {
            findings.Add(ReplayFinding.Nondeterministic(api, operation.Syntax.GetLocation()));
        }

        if (DescribeExternal(operation, out var explanation) is { } external && DescribeExternal(GetReceiverOf(operation), out _) is null
            && !IsPersistentCall(operation, explanation, analysis, cancellationToken))
        {
            findings.Add(ReplayFinding.External(external, explanation, operation.Syntax.GetLocation()));
        }

        AddStateWrites(operation, analysis, scope, findings, cancellationToken);
        AddCallEdges(operation, analysis, scope, edges, cancellationToken);
    }
}
