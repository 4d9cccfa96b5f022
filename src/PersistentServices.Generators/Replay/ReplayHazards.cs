using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// Classifies one operation: a nondeterministic API (PS0201), an external input or process fact (PS0202), a write to
/// memory that outlives the request (PS0102), and the calls into source methods to follow. The same classification
/// runs on persistent code and on the methods it calls (docs/diagnostics.md lists what each rule detects).
/// </summary>
internal static class ReplayHazards
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

    // ---------------------------------------------------------------- PS0201

    /// <summary>The API's display name when <paramref name="operation"/> uses a nondeterministic API; otherwise null.</summary>
    private static string? DescribeNondeterministic(IOperation? operation)
    {
        switch (operation)
        {
            case IPropertyReferenceOperation reference:
                return IsNondeterministicMember(reference.Property) ? reference.Property.ContainingType.Name + "." + reference.Property.Name : null;
            case IFieldReferenceOperation reference:
                return IsNondeterministicMember(reference.Field) ? reference.Field.ContainingType.Name + "." + reference.Field.Name : null;
            case IInvocationOperation invocation:
                return IsNondeterministicMember(invocation.TargetMethod) || IsUnloggedClockReading(invocation)
                    ? invocation.TargetMethod.ContainingType.Name + "." + invocation.TargetMethod.Name + "()"
                    : null;
            case IMethodReferenceOperation reference:
                return IsNondeterministicMember(reference.Method) ? reference.Method.ContainingType.Name + "." + reference.Method.Name + "()" : null;
            case IObjectCreationOperation creation when creation.Type is { } type && IsAlwaysNondeterministicType(type):
                return "new " + type.Name + "()";
            default:
                return null;
        }
    }

    private static bool IsNondeterministicMember(ISymbol member)
    {
        var type = member.ContainingType;
        if (type is null)
        {
            return false;
        }

        if (IsAlwaysNondeterministicType(type))
        {
            return true;
        }

        var name = member.Name;
        if (KnownSymbols.Is(type, "System", "DateTime"))
        {
            return member.IsStatic && name is "Now" or "UtcNow" or "Today";
        }

        if (KnownSymbols.Is(type, "System", "DateTimeOffset"))
        {
            return member.IsStatic && name is "Now" or "UtcNow";
        }

        if (KnownSymbols.Is(type, "System", "Guid"))
        {
            return member.IsStatic && name is "NewGuid" or "CreateVersion7";
        }

        if (KnownSymbols.Is(type, "System", "Environment"))
        {
            return name is "TickCount" or "TickCount64";
        }

        if (KnownSymbols.Is(type, "System", "TimeProvider"))
        {
            return member.IsStatic && name is "System";
        }

        return false;
    }

    /// <summary>
    /// A clock reading on a receiver typed <c>System.TimeProvider</c> itself: the TimeProvider the container holds is
    /// <c>TimeProvider.System</c> unless the application registered another, and nothing logs it. Readings through
    /// <c>PersistentTimeProvider</c> (or any type derived from TimeProvider) are not reported; a reading on
    /// <c>TimeProvider.System</c> directly is reported once, at <c>TimeProvider.System</c>.
    /// </summary>
    private static bool IsUnloggedClockReading(IInvocationOperation invocation)
        => invocation.TargetMethod is { IsStatic: false, Name: "GetUtcNow" or "GetLocalNow" or "GetTimestamp" } method
           && KnownSymbols.Is(method.ContainingType, "System", "TimeProvider")
           && invocation.Instance is { Type: { } receiver } instance
           && KnownSymbols.Is(receiver, "System", "TimeProvider")
           && instance is not IPropertyReferenceOperation { Property: { IsStatic: true, Name: "System" } };

    /// <summary>Types every use of which is nondeterministic: Random, RandomNumberGenerator, Stopwatch (and derived types).</summary>
    private static bool IsAlwaysNondeterministicType(ITypeSymbol type)
        => KnownSymbols.IsOrDerivesFrom(type, "System", "Random")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Security.Cryptography", "RandomNumberGenerator")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Diagnostics", "Stopwatch");

    /// <summary>The receiver of a member use (a chain of uses of one value is reported once, at its source).</summary>
    private static IOperation? GetReceiverOf(IOperation operation) => operation switch
    {
        IPropertyReferenceOperation reference => Operations.SkipConversions(reference.Instance),
        IFieldReferenceOperation reference => Operations.SkipConversions(reference.Instance),
        IInvocationOperation invocation => Operations.GetReceiver(invocation),
        IMethodReferenceOperation reference => Operations.SkipConversions(reference.Instance),
        _ => null,
    };

    // ---------------------------------------------------------------- PS0202

    /// <summary>The API's display name when <paramref name="operation"/> is external input or a process fact; otherwise null.</summary>
    private static string? DescribeExternal(IOperation? operation, out string explanation)
    {
        explanation = string.Empty;
        return operation switch
        {
            IInvocationOperation invocation => DescribeExternalMethod(invocation.TargetMethod, out explanation),
            IMethodReferenceOperation reference => DescribeExternalMethod(reference.Method, out explanation),
            IPropertyReferenceOperation reference => DescribeExternalProperty(reference.Property, out explanation),
            IObjectCreationOperation { Constructor: { } constructor } => DescribeExternalCreation(constructor, out explanation),
            _ => null,
        };
    }

    /// <summary>
    /// True for a send through a client registered with <c>AddPersistentCalls()</c> (docs/calls.md): it is a persistent
    /// call, deduplicated at the callee and answered from the log in replay, not external input.
    /// </summary>
    private static bool IsPersistentCall(IOperation operation, string explanation, ReplayAnalysis analysis, CancellationToken cancellationToken)
    {
        if (!string.Equals(explanation, Descriptors.HttpCallExplanation, StringComparison.Ordinal))
        {
            return false;
        }

        var receiver = operation switch
        {
            IInvocationOperation invocation => Operations.GetReceiver(invocation),
            IMethodReferenceOperation reference => Operations.SkipConversions(reference.Instance),
            _ => null,
        };
        return receiver is not null && analysis.GetRegistry(cancellationToken).CallClients.IsPersistentClient(receiver, analysis.Source, cancellationToken);
    }

    private static string? DescribeExternalMethod(IMethodSymbol method, out string explanation)
    {
        explanation = string.Empty;
        method = method.ReducedFrom ?? method;
        var type = method.ContainingType;
        if (type is null || method.MethodKind != MethodKind.Ordinary)
        {
            return null;
        }

        var name = method.Name;
        var display = (method.IsExtensionMethod && method.Parameters.Length > 0 ? method.Parameters[0].Type.Name : type.Name) + "." + name + "()";

        if ((KnownSymbols.IsOrDerivesFrom(type, "System.Net.Http", "HttpMessageInvoker") && !method.IsStatic && !ObjectMembers.Contains(name) && name != "CancelPendingRequests")
            || KnownSymbols.Is(type, "System.Net.Http.Json", "HttpClientJsonExtensions"))
        {
            explanation = Descriptors.HttpCallExplanation;
            return display;
        }

        if (KnownSymbols.Is(type, "System.IO", "File")
            || KnownSymbols.Is(type, "System.IO", "Directory")
            || KnownSymbols.Is(type, "System.IO", "RandomAccess")
            || (KnownSymbols.Is(type, "System.IO", "Path") && name == "GetTempFileName")
            || ((KnownSymbols.IsOrDerivesFrom(type, "System.IO", "FileSystemInfo") || KnownSymbols.Is(type, "System.IO", "DriveInfo"))
                && !ObjectMembers.Contains(name)))
        {
            explanation = Descriptors.FileExplanation;
            return display;
        }

        if (IsDatabaseCall(method, type, name))
        {
            explanation = Descriptors.DatabaseExplanation;
            return display;
        }

        if ((IsSocketType(type) && !ObjectMembers.Contains(name)) || KnownSymbols.Is(type, "System.Net", "Dns"))
        {
            explanation = Descriptors.NetworkExplanation;
            return display;
        }

        if (KnownSymbols.Is(type, "System.Diagnostics", "Process") && name == "GetCurrentProcess")
        {
            explanation = Descriptors.ProcessFactExplanation;
            return display;
        }

        return null;
    }

    private static bool IsDatabaseCall(IMethodSymbol method, INamedTypeSymbol type, string name)
    {
        if (IsDbConnection(type))
        {
            return name.StartsWith("Open", StringComparison.Ordinal)
                   || name.StartsWith("BeginTransaction", StringComparison.Ordinal)
                   || name.StartsWith("BeginDbTransaction", StringComparison.Ordinal)
                   || name.StartsWith("ChangeDatabase", StringComparison.Ordinal)
                   || name.StartsWith("GetSchema", StringComparison.Ordinal)
                   || name == "EnlistTransaction";
        }

        if (KnownSymbols.IsOrDerivesFrom(type, "System.Data.Common", "DbCommand")
            || KnownSymbols.IsOrDerivesFrom(type, "System.Data.Common", "DbBatch")
            || KnownSymbols.Is(type, "System.Data", "IDbCommand"))
        {
            return name.StartsWith("Execute", StringComparison.Ordinal) || name.StartsWith("Prepare", StringComparison.Ordinal);
        }

        // Extension methods on a connection (Dapper's QueryAsync, ExecuteAsync, ...).
        return method.IsExtensionMethod && method.Parameters.Length > 0 && method.Parameters[0].Type is INamedTypeSymbol first && IsDbConnection(first);
    }

    private static bool IsDbConnection(INamedTypeSymbol type)
    {
        if (KnownSymbols.IsOrDerivesFrom(type, "System.Data.Common", "DbConnection") || KnownSymbols.Is(type, "System.Data", "IDbConnection"))
        {
            return true;
        }

        foreach (var implemented in type.AllInterfaces)
        {
            if (KnownSymbols.Is(implemented, "System.Data", "IDbConnection"))
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsSocketType(ITypeSymbol type)
        => KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "Socket")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "TcpClient")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "UdpClient")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "TcpListener")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Net.Sockets", "NetworkStream");

    private static string? DescribeExternalProperty(IPropertySymbol property, out string explanation)
    {
        explanation = string.Empty;
        var type = property.ContainingType;
        var name = property.Name;
        var display = type.Name + "." + name;
        if ((KnownSymbols.Is(type, "System", "Environment") && name is "ProcessId" or "MachineName" or "CurrentManagedThreadId")
            || (KnownSymbols.Is(type, "System.Threading", "Thread") && name == "ManagedThreadId"))
        {
            explanation = Descriptors.ProcessFactExplanation;
            return display;
        }

        if ((KnownSymbols.IsOrDerivesFrom(type, "System.IO", "FileSystemInfo") && FileSystemInfoProperties.Contains(name))
            || (KnownSymbols.Is(type, "System.IO", "DriveInfo") && name is not "Name" and not "RootDirectory"))
        {
            explanation = Descriptors.FileExplanation;
            return display;
        }

        return null;
    }

    private static string? DescribeExternalCreation(IMethodSymbol constructor, out string explanation)
    {
        explanation = string.Empty;
        var type = constructor.ContainingType;
        var display = "new " + type.Name + "()";
        var firstIsString = constructor.Parameters.Length > 0 && constructor.Parameters[0].Type.SpecialType == SpecialType.System_String;
        if (KnownSymbols.IsOrDerivesFrom(type, "System.IO", "FileStream")
            || ((KnownSymbols.Is(type, "System.IO", "StreamReader") || KnownSymbols.Is(type, "System.IO", "StreamWriter")) && firstIsString))
        {
            explanation = Descriptors.FileExplanation;
            return display;
        }

        // new TcpClient("host", port) and new UdpClient("host", port) connect.
        if ((KnownSymbols.Is(type, "System.Net.Sockets", "TcpClient") || KnownSymbols.Is(type, "System.Net.Sockets", "UdpClient")) && firstIsString)
        {
            explanation = Descriptors.NetworkExplanation;
            return display;
        }

        return null;
    }

    // ---------------------------------------------------------------- PS0102

    private static void AddStateWrites(IOperation operation, ReplayAnalysis analysis, WriteScope scope, List<ReplayFinding> findings, CancellationToken cancellationToken)
    {
        switch (operation)
        {
            case ISimpleAssignmentOperation assignment:
                AddWrite(assignment.Target, "assigned", assignment, analysis, scope, findings, cancellationToken);
                break;
            case ICompoundAssignmentOperation compound:
                AddWrite(compound.Target, "changed by '" + OperatorText(compound.OperatorKind) + "='", compound, analysis, scope, findings, cancellationToken);
                break;
            case ICoalesceAssignmentOperation coalesce:
                AddWrite(coalesce.Target, "assigned by '??='", coalesce, analysis, scope, findings, cancellationToken);
                break;
            case IIncrementOrDecrementOperation increment:
                AddWrite(increment.Target, increment.Kind == OperationKind.Increment ? "incremented" : "decremented", increment, analysis, scope, findings, cancellationToken);
                break;
            case IDeconstructionAssignmentOperation deconstruction:
                AddTupleWrites(deconstruction.Target, deconstruction, analysis, scope, findings, cancellationToken);
                break;
            case IArgumentOperation { Parameter.RefKind: RefKind.Ref or RefKind.Out } argument
                when argument.Parent is IInvocationOperation or IObjectCreationOperation:
                var callee = argument.Parent is IInvocationOperation call ? call.TargetMethod : ((IObjectCreationOperation)argument.Parent).Constructor;
                var how = "passed by " + (argument.Parameter.RefKind == RefKind.Out ? "out" : "ref") + " to " + (callee is null ? "a method" : Operations.Display(callee.ReducedFrom ?? callee));
                AddWrite(argument.Value, how, argument, analysis, scope, findings, cancellationToken);
                break;
            case IInvocationOperation invocation when IsCollectionMutator(invocation.TargetMethod):
                var receiver = Operations.GetReceiver(invocation);
                if (receiver is not null && FindPlace(receiver, asReceiver: true, analysis, scope, cancellationToken) is { } place)
                {
                    var method = invocation.TargetMethod.ReducedFrom ?? invocation.TargetMethod;
                    var verb = "changed by " + Operations.DisplayType(method.IsExtensionMethod ? method.Parameters[0].Type : method.ContainingType) + "." + method.Name + "()";
                    findings.Add(ReplayFinding.StateWrite(place.Place, place.Member is null ? verb : "changed (" + place.Member + " " + verb + ")", invocation.Syntax.GetLocation()));
                }

                break;
        }
    }

    private static void AddTupleWrites(IOperation target, IOperation write, ReplayAnalysis analysis, WriteScope scope, List<ReplayFinding> findings, CancellationToken cancellationToken)
    {
        if (target is ITupleOperation tuple)
        {
            foreach (var element in tuple.Elements)
            {
                AddTupleWrites(element, write, analysis, scope, findings, cancellationToken);
            }
        }
        else
        {
            AddWrite(target, "assigned", write, analysis, scope, findings, cancellationToken);
        }
    }

    private static void AddWrite(IOperation target, string verb, IOperation write, ReplayAnalysis analysis, WriteScope scope, List<ReplayFinding> findings, CancellationToken cancellationToken)
    {
        if (FindPlace(target, asReceiver: false, analysis, scope, cancellationToken) is { } place)
        {
            findings.Add(ReplayFinding.StateWrite(place.Place, place.Member is null ? verb : "changed (" + place.Member + " " + verb + ")", write.Syntax.GetLocation()));
        }
    }

    /// <summary>
    /// The memory that a write to <paramref name="target"/> changes, when it outlives the request (or is a field of
    /// <c>this</c>, which the caller decides about); null for locals, parameters, new objects, [SessionState] and
    /// [Shared] members, shared variables and anything not tracked. <see cref="PlaceResult.Member"/> is null when the
    /// place itself is written, or names the part written ("'X'", "an element") when an object held there is changed.
    /// <c>asReceiver</c> is true when the target holds an object that is changed (a receiver), false when it is assigned.
    /// </summary>
    private static PlaceResult? FindPlace(IOperation? target, bool asReceiver, ReplayAnalysis analysis, WriteScope scope, CancellationToken cancellationToken)
    {
        switch (Operations.SkipConversions(target))
        {
            case IFieldReferenceOperation reference:
                return FieldPlace(reference, analysis, scope, cancellationToken);
            case IPropertyReferenceOperation reference:
                return PropertyPlace(reference, asReceiver, analysis, scope, cancellationToken);
            case IArrayElementReferenceOperation element:
                return Through(FindPlace(element.ArrayReference, asReceiver: true, analysis, scope, cancellationToken), "an element");
            case ILocalReferenceOperation local when scope.IsCapturedFromOutside(local.Local):
                return new PlaceResult(new StatePlace(StatePlaceKind.Captured, local.Local.Name, local.Local.Name, "a local variable captured by the endpoint"), null);
            case IParameterReferenceOperation parameter when scope.IsCapturedFromOutside(parameter.Parameter):
                return new PlaceResult(new StatePlace(StatePlaceKind.Captured, parameter.Parameter.Name, parameter.Parameter.Name, "a parameter captured by the endpoint"), null);
            default:
                return null;
        }
    }

    private static PlaceResult? FieldPlace(IFieldReferenceOperation reference, ReplayAnalysis analysis, WriteScope scope, CancellationToken cancellationToken)
    {
        var field = reference.Field;
        var name = field.AssociatedSymbol?.Name ?? field.Name;
        if (field.IsConst || IsUntrackedStorage(field.Type) || name.StartsWith("__PersistentServices_", StringComparison.Ordinal))
        {
            return null;
        }

        var type = field.ContainingType;
        var text = type.Name + "." + name;
        if (field.IsStatic)
        {
            return scope.IsStaticConstructorOf(type) ? null : new PlaceResult(new StatePlace(StatePlaceKind.Static, text, name, "a static field"), null);
        }

        return InstanceMemberPlace(reference.Instance, type, text, name, "field", analysis, scope, cancellationToken);
    }

    private static PlaceResult? PropertyPlace(IPropertyReferenceOperation reference, bool asReceiver, ReplayAnalysis analysis, WriteScope scope, CancellationToken cancellationToken)
    {
        var property = reference.Property;
        if (PersistentCode.IsStateProperty(property) || IsUntrackedStorage(property.Type))
        {
            return null;
        }

        if (property.IsIndexer)
        {
            return Through(FindPlace(reference.Instance, asReceiver: true, analysis, scope, cancellationToken), "an element");
        }

        // A property with accessor bodies in this compilation is not memory itself: its setter is followed as a call.
        var storage = asReceiver || !HasAccessorBodies(property, analysis);
        var type = property.ContainingType;
        var text = type.Name + "." + property.Name;
        if (property.IsStatic)
        {
            return storage ? new PlaceResult(new StatePlace(StatePlaceKind.Static, text, property.Name, "a static property"), null) : null;
        }

        if (!analysis.Source.IsInSource(property))
        {
            // A property of a library type: the object that holds it is changed.
            return Through(FindPlace(reference.Instance, asReceiver: true, analysis, scope, cancellationToken), "'" + property.Name + "'");
        }

        return storage ? InstanceMemberPlace(reference.Instance, type, text, property.Name, "property", analysis, scope, cancellationToken) : null;
    }

    private static PlaceResult? InstanceMemberPlace(
        IOperation? instance,
        INamedTypeSymbol type,
        string text,
        string name,
        string memberKind,
        ReplayAnalysis analysis,
        WriteScope scope,
        CancellationToken cancellationToken)
    {
        var receiver = Operations.SkipConversions(instance);
        if (receiver is IObjectCreationOperation or IInstanceReferenceOperation { ReferenceKind: InstanceReferenceKind.ImplicitReceiver })
        {
            // An object being created (object initializer, new X().Y = ...): it is not the singleton.
            return null;
        }

        if (Operations.IsThis(receiver) && scope.IsInstanceConstructorOf(type))
        {
            return null;
        }

        if (analysis.GetRegistry(cancellationToken).IsSingleton(type))
        {
            return new PlaceResult(new StatePlace(StatePlaceKind.Singleton, text, name, "a " + memberKind + " of the singleton '" + type.Name + "'"), null);
        }

        if (Operations.IsThis(receiver))
        {
            return new PlaceResult(new StatePlace(StatePlaceKind.This, text, name, "a " + memberKind), null);
        }

        return Through(FindPlace(receiver, asReceiver: true, analysis, scope, cancellationToken), "'" + name + "'");
    }

    private static PlaceResult? Through(PlaceResult? holder, string member)
        => holder is null ? null : new PlaceResult(holder.Place, holder.Member is null ? member : holder.Member);

    /// <summary>Handles that are not memory of their own: shared variables and maps, session state keys, async-locals.</summary>
    private static bool IsUntrackedStorage(ITypeSymbol type)
        => (type is INamedTypeSymbol named
            && ((KnownSymbols.IsNamespace(named.ContainingNamespace, "PersistentServices.SharedState") && named.MetadataName is "SharedVariable`1" or "SharedMap`2")
                || (KnownSymbols.IsNamespace(named.ContainingNamespace, "PersistentServices.Sessions") && named.MetadataName == "SessionStateKey`1")
                || KnownSymbols.Is(named, "System.Threading", "AsyncLocal`1")));

    private static bool HasAccessorBodies(IPropertySymbol property, ReplayAnalysis analysis)
    {
        if (!analysis.Source.IsInSource(property))
        {
            return false;
        }

        foreach (var accessor in new[] { property.GetMethod, property.SetMethod })
        {
            if (accessor is not null && ReplayAnalysis.HasBody(accessor))
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsCollectionMutator(IMethodSymbol method)
    {
        method = method.ReducedFrom ?? method;
        if (!CollectionMutators.Contains(method.Name) || method.ContainingType is not { } type)
        {
            return false;
        }

        var ns = type.ContainingNamespace;
        if (KnownSymbols.IsNamespace(ns, "System.Collections.Immutable"))
        {
            // Immutable collections return a new collection; only their builders change in place.
            return type.Name == "Builder" && type.ContainingType is not null;
        }

        return KnownSymbols.IsNamespace(ns, "System.Collections")
               || KnownSymbols.IsNamespace(ns, "System.Collections.Generic")
               || KnownSymbols.IsNamespace(ns, "System.Collections.Concurrent")
               || KnownSymbols.IsNamespace(ns, "System.Collections.ObjectModel")
               || KnownSymbols.IsNamespace(ns, "System.Collections.Specialized");
    }

    private static string OperatorText(BinaryOperatorKind kind) => kind switch
    {
        BinaryOperatorKind.Add => "+",
        BinaryOperatorKind.Subtract => "-",
        BinaryOperatorKind.Multiply => "*",
        BinaryOperatorKind.Divide => "/",
        BinaryOperatorKind.Remainder => "%",
        BinaryOperatorKind.And => "&",
        BinaryOperatorKind.Or => "|",
        BinaryOperatorKind.ExclusiveOr => "^",
        BinaryOperatorKind.LeftShift => "<<",
        BinaryOperatorKind.RightShift => ">>",
        BinaryOperatorKind.UnsignedRightShift => ">>>",
        _ => kind.ToString(),
    };

    // ---------------------------------------------------------------- calls to follow

    private static void AddCallEdges(IOperation operation, ReplayAnalysis analysis, WriteScope scope, List<CallEdge> edges, CancellationToken cancellationToken)
    {
        switch (operation)
        {
            case IInvocationOperation invocation:
                var method = invocation.TargetMethod.ReducedFrom ?? invocation.TargetMethod;
                AddEdge(method, method.IsStatic ? null : invocation.Instance, analysis, scope, edges, cancellationToken);
                break;
            case IMethodReferenceOperation reference:
                AddEdge(reference.Method.ReducedFrom ?? reference.Method, reference.Method.IsStatic ? null : reference.Instance, analysis, scope, edges, cancellationToken);
                break;
            case IObjectCreationOperation { Constructor: { } constructor }:
                AddEdge(constructor, null, analysis, scope, edges, cancellationToken);
                break;
            case IPropertyReferenceOperation reference when !PersistentCode.IsStateProperty(reference.Property):
                var (get, set) = GetAccessorUse(reference);
                var instance = reference.Property.IsStatic ? null : reference.Instance;
                if (get && reference.Property.GetMethod is { } getter)
                {
                    AddEdge(getter, instance, analysis, scope, edges, cancellationToken);
                }

                if (set && reference.Property.SetMethod is { } setter)
                {
                    AddEdge(setter, instance, analysis, scope, edges, cancellationToken);
                }

                break;
        }
    }

    private static void AddEdge(IMethodSymbol method, IOperation? instance, ReplayAnalysis analysis, WriteScope scope, List<CallEdge> edges, CancellationToken cancellationToken)
    {
        method = method.OriginalDefinition;
        var isDispatch = method.IsAbstract || method.ContainingType?.TypeKind == TypeKind.Interface;
        if (!isDispatch && !analysis.Source.IsInSource(method))
        {
            return;
        }

        // The receiver: this, an object held in memory that outlives the request, or nothing that matters.
        var kind = ReceiverKind.None;
        StatePlace? holder = null;
        if (instance is not null)
        {
            if (Operations.IsThis(instance))
            {
                kind = ReceiverKind.This;
            }
            else if (FindPlace(instance, asReceiver: true, analysis, scope, cancellationToken) is { } place)
            {
                kind = place.Place.Outlives ? ReceiverKind.Holder : ReceiverKind.This;
                holder = place.Place.Outlives ? place.Place : null;
            }
        }

        if (!isDispatch)
        {
            edges.Add(new CallEdge(method, kind, holder));
            return;
        }

        // An interface or abstract member: follow the implementations registered for the receiver's type.
        var serviceTypes = new HashSet<INamedTypeSymbol>(SymbolEqualityComparer.Default);
        if (Operations.SkipConversions(instance)?.Type is INamedTypeSymbol receiverType)
        {
            serviceTypes.Add(receiverType.OriginalDefinition);
        }

        if (method.ContainingType is { } declaring)
        {
            serviceTypes.Add(declaring.OriginalDefinition);
        }

        var targets = new HashSet<IMethodSymbol>(SymbolEqualityComparer.Default);

        var registry = analysis.GetRegistry(cancellationToken);
        foreach (var serviceType in serviceTypes)
        {
            foreach (var implementation in registry.GetImplementations(serviceType))
            {
                if (FindImplementation(implementation, method) is { } target && analysis.Source.IsInSource(target) && targets.Add(target.OriginalDefinition))
                {
                    edges.Add(new CallEdge(target.OriginalDefinition, kind, holder));
                }
            }
        }
    }

    private static IMethodSymbol? FindImplementation(INamedTypeSymbol implementation, IMethodSymbol method)
    {
        if (method.ContainingType.TypeKind == TypeKind.Interface)
        {
            return implementation.FindImplementationForInterfaceMember(method) as IMethodSymbol;
        }

        for (var type = implementation; type is not null; type = type.BaseType)
        {
            foreach (var member in type.GetMembers(method.Name))
            {
                for (var overridden = (member as IMethodSymbol)?.OverriddenMethod; overridden is not null; overridden = overridden.OverriddenMethod)
                {
                    if (SymbolEqualityComparer.Default.Equals(overridden.OriginalDefinition, method))
                    {
                        return (IMethodSymbol)member;
                    }
                }
            }
        }

        return null;
    }

    /// <summary>Which accessors a property reference runs: the getter, the setter, or both (<c>++</c>, <c>+=</c>).</summary>
    private static (bool Get, bool Set) GetAccessorUse(IPropertyReferenceOperation reference)
    {
        IOperation current = reference;
        while (current.Parent is IConversionOperation or ITupleOperation)
        {
            current = current.Parent;
        }

        return current.Parent switch
        {
            ISimpleAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (false, true),
            IDeconstructionAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (false, true),
            ICompoundAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (true, true),
            ICoalesceAssignmentOperation assignment when ReferenceEquals(assignment.Target, current) => (true, true),
            IIncrementOrDecrementOperation => (true, true),
            _ => (true, false),
        };
    }

    private sealed class PlaceResult
    {
        public PlaceResult(StatePlace place, string? member)
        {
            Place = place;
            Member = member;
        }

        public StatePlace Place { get; }

        public string? Member { get; }
    }
}
